"""The app's metrics, ``registry.feed_metrics``: the counters, histograms
and gauges of the feeds (in this process's own registry, or in the files of
prometheus_client's multi-process mode), the methods that record a value,
which never fail their caller, and the scrape hooks whose values are read
at scrape time."""

from __future__ import annotations

import functools
import logging
import os
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from pyramid.exceptions import ConfigurationError

from .figures import FeedFigures
from .metric_names import (
    CHECKPOINT_AGE,
    COMMIT_LAG,
    ITEMS,
    LAG_BUCKETS,
    LONGPOLL_OVER_CAP,
    LONGPOLL_TIMEOUTS,
    LONGPOLL_WAITERS,
    LONGPOLL_WAKEUPS,
    PAGE_BUCKETS,
    PAGE_SECONDS,
    PAGES,
    RECONCILE_BYTES,
    RECONCILE_DIFFERENCES,
    RECONCILE_ROUNDS,
    RECONCILE_SESSIONS,
)
from .metrics_scrape import ScrapeCollector

log = logging.getLogger("openprocurement_feed.metrics")  # its name from before the package had subpackages

#: The environment variable of prometheus_client's multi-process mode.
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

#: A scrape hook: the checkpoint age of each collection, in seconds.
AgeHook = Callable[[], Mapping[str, float | None]]
#: A lag-window hook: per collection, ``{"p50": s, "p99": s, "max": s}``.
WindowHook = Callable[[], Mapping[str, Mapping[str, float | None]]]


#: A health hook: the figures of every feed.
HealthHook = Callable[[], Iterable[FeedFigures]]
Recorder = TypeVar("Recorder", bound=Callable[..., None])


def never_raises(method: Recorder) -> Recorder:
    """A recording method of :class:`FeedMetrics` that logs and counts its
    errors instead of raising them into a request or the sequencer."""

    @functools.wraps(method)
    def guarded(self: FeedMetrics, *args: Any) -> None:
        try:
            method(self, *args)
        except Exception as error:  # a metric value must never stop its caller
            self.failed(method.__name__, error)

    return guarded  # type: ignore[return-value]


class FeedMetrics:
    """The metrics of one app, kept on its registry as ``registry.feed_metrics``.

    :param multiprocess_dir: the ``PROMETHEUS_MULTIPROC_DIR`` of
        prometheus_client's multi-process mode, or None for a registry of
        this process only. :meth:`from_environ` picks it from the environment.

    :attr:`registry` is what a scrape reads (``generate_latest(registry)``).
    Every instance owns its metrics, so several apps in one process (tests)
    never collide; in multi-process mode the values of the whole process go
    to the same files, as prometheus_client does.
    """

    def __init__(self, multiprocess_dir: str | None = None) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, values

        self.multiprocess_dir = multiprocess_dir or None
        if self.multiprocess_dir is None and getattr(values.ValueClass, "_multiprocess", False):
            raise ConfigurationError(
                f"prometheus_client was imported while {MULTIPROC_ENV} was set, and it is no longer set: "
                "set it for the whole life of the process, or not at all."
            )
        if self.multiprocess_dir is not None:
            if not getattr(values.ValueClass, "_multiprocess", False):
                raise ConfigurationError(
                    f"{MULTIPROC_ENV} is set to {multiprocess_dir!r} but prometheus_client "
                    "was imported before it was: set it before the process starts."
                )
            if not os.path.isdir(self.multiprocess_dir):
                raise ConfigurationError(f"{MULTIPROC_ENV} is {multiprocess_dir!r}, which is not a directory.")
        # In multi-process mode the values live in files and the metric
        # objects belong to no registry; the scrape reads the files.
        own = CollectorRegistry() if self.multiprocess_dir is None else None
        self.pages = Counter(PAGES, "Feed pages answered, by HTTP status.", ["feed", "status"], registry=own)
        self.items = Counter(ITEMS, "Items served in feed pages.", ["feed"], registry=own)
        self.page_seconds = Histogram(
            PAGE_SECONDS,
            "Feed page latency in seconds.",
            ["feed"],
            buckets=PAGE_BUCKETS,
            registry=own,
        )
        self.commit_lag = Histogram(
            COMMIT_LAG,
            "Start-to-commit lag of writes: a change event's wallTime minus the "
            "document's public_modified, in seconds.",
            ["collection"],
            buckets=LAG_BUCKETS,
            registry=own,
        )
        self.checkpoint_age = Gauge(
            CHECKPOINT_AGE,
            "Age of a commit-ordered feed's checkpoint in seconds.",
            ["collection"],
            multiprocess_mode="mostrecent",
            registry=own,
        )
        self.longpoll_waiters = Gauge(
            LONGPOLL_WAITERS,
            "feed=longpoll requests waiting now.",
            ["feed"],
            multiprocess_mode="livesum",
            registry=own,
        )
        self._longpoll_counters = {
            "wakeup": Counter(
                LONGPOLL_WAKEUPS, "Long-poll waiters woken to read their page again.", ["feed"], registry=own
            ),
            "timeout": Counter(
                LONGPOLL_TIMEOUTS, "Long-poll requests answered at their timeout.", ["feed"], registry=own
            ),
            "over_cap": Counter(
                LONGPOLL_OVER_CAP,
                "Long-poll requests answered at once, over feed.longpoll_max_waiters.",
                ["feed"],
                registry=own,
            ),
        }
        self._reconcile = {
            "session": Counter(
                RECONCILE_SESSIONS,
                "Reconcile sessions begun (GET of a feed's reconcile endpoint).",
                ["feed"],
                registry=own,
            ),
            "round": Counter(RECONCILE_ROUNDS, "Reconcile rounds answered (POST).", ["feed"], registry=own),
            "bytes": Counter(
                RECONCILE_BYTES,
                "Bytes of reconcile messages, by direction (received: the clients', sent: the answers).",
                ["feed", "direction"],
                registry=own,
            ),
            "differences": Counter(
                RECONCILE_DIFFERENCES,
                "Records found on one side only in the id lists of reconcile rounds.",
                ["feed"],
                registry=own,
            ),
        }
        if own is not None:
            self._source: Any = own
        else:
            from prometheus_client.multiprocess import MultiProcessCollector

            self._source = MultiProcessCollector(None, path=self.multiprocess_dir)  # type: ignore[no-untyped-call]  # unannotated upstream
        self._age_hooks: list[AgeHook] = []
        self._window_hooks: list[WindowHook] = []
        self._health_hooks: list[HealthHook] = []
        # Label children cached per label values: ``labels()`` validates and
        # locks on every call, a dictionary hit does not.
        self._page_children: dict[tuple[str, str], tuple[Any, Any, Any]] = {}
        self._lag_children: dict[str, Any] = {}
        #: values that could not be recorded (:func:`never_raises`)
        self.errors = 0
        self._errors_lock = threading.Lock()
        self._failed: set[str] = set()
        self.registry = CollectorRegistry()
        self.registry.register(
            ScrapeCollector(
                self._source,
                ages=lambda: self._call_hooks(self._age_hooks),
                windows=lambda: self._call_hooks(self._window_hooks),
                figures=self.figures,
                errors=lambda: self.errors,
            )
        )

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> FeedMetrics:
        """Metrics in multi-process mode when ``PROMETHEUS_MULTIPROC_DIR`` is set."""
        return cls(environ.get(MULTIPROC_ENV) or None)

    @property
    def multiprocess(self) -> bool:
        """True when values are written to ``PROMETHEUS_MULTIPROC_DIR``."""
        return self.multiprocess_dir is not None

    def failed(self, what: str, error: Exception) -> None:
        """Count a value ``what`` could not record; log the first one of
        each method and then one in a thousand (a broken metric fails on
        every request)."""
        with self._errors_lock:
            self.errors += 1
            count = self.errors
            first = what not in self._failed
            self._failed.add(what)
        if first or count % 1000 == 0:
            log.error("Metrics: %s failed (%d value(s) lost so far): %r", what, count, error)

    @never_raises
    def observe_page(self, feed: str, status: int, seconds: float, items: int = 0) -> None:
        """Count one feed page with its final HTTP status, time it, and count
        its items (for a 200)."""
        key = (feed, str(status))
        children = self._page_children.get(key)
        if children is None:
            children = (
                self.pages.labels(feed, key[1]),
                self.page_seconds.labels(feed),
                self.items.labels(feed),
            )
            self._page_children[key] = children
        pages, latency, served = children
        pages.inc()
        latency.observe(seconds)
        if items:
            served.inc(items)

    @never_raises
    def observe_lag(self, collection: str, seconds: float) -> None:
        """Record the start-to-commit lag of one write to ``collection``.

        A change event's ``wallTime`` has millisecond resolution, so a lag
        can come out a little below zero: it is recorded as 0, which keeps
        the histogram's sum monotonic.
        """
        child = self._lag_children.get(collection)
        if child is None:
            child = self._lag_children[collection] = self.commit_lag.labels(collection)
        child.observe(max(0.0, seconds))

    @never_raises
    def set_checkpoint_age(self, collection: str, seconds: float) -> None:
        """Set the checkpoint age of ``collection`` (a scrape hook's value for
        the same collection, computed later, wins)."""
        self.checkpoint_age.labels(collection).set(seconds)

    @never_raises
    def observe_reconcile(self, feed: str, what: str, received: int = 0, sent: int = 0, found: int = 0) -> None:
        """Count a reconcile ``session`` (its GET) or ``round`` (a POST) of
        ``feed``, with the bytes received and sent and the differences found."""
        counters = self._reconcile
        counters["session" if what == "session" else "round"].labels(feed).inc()
        if received:
            counters["bytes"].labels(feed, "received").inc(received)
        if sent:
            counters["bytes"].labels(feed, "sent").inc(sent)
        if found:
            counters["differences"].labels(feed).inc(found)

    @never_raises
    def longpoll_waiting(self, feed: str, delta: int) -> None:
        """One more (``delta = 1``) or one fewer (``-1``) waiter on ``feed``."""
        self.longpoll_waiters.labels(feed).inc(delta)

    @never_raises
    def longpoll_event(self, feed: str, what: str) -> None:
        """Count a long-poll ``wakeup``, ``timeout`` or ``over_cap`` answer."""
        counter = self._longpoll_counters.get(what)
        if counter is not None:
            counter.labels(feed).inc()

    def add_scrape_hook(self, hook: AgeHook) -> None:
        """Call ``hook()`` at every scrape for ``{collection: age_seconds}``:
        the checkpoint ages, read from shared state so every worker reports
        them. A hook that raises is logged and skipped; None values are left
        out."""
        self._age_hooks.append(hook)

    def add_lag_window_hook(self, hook: WindowHook) -> None:
        """Call ``hook()`` at every scrape for ``{collection: {"p50": s,
        "p99": s, "max": s}}``, reported as
        ``openprocurement_feed_lag_window_seconds{collection, quantile}``
        with ``quantile`` 0.5, 0.99 and 1 (the maximum)."""
        self._window_hooks.append(hook)

    def add_health_hook(self, hook: HealthHook) -> None:
        """Call ``hook()`` at every scrape for the :class:`FeedFigures` of
        every feed, reported as ``openprocurement_feed_verdict{feed,
        verdict}`` (1 for the feed's verdict, 0 for the three others),
        ``openprocurement_feed_watcher_age_seconds{collection}`` and
        ``openprocurement_feed_checkpoint_behind_seconds{collection}``. Read
        from the database, so every worker reports them alike; a hook that
        raises is logged and skipped."""
        self._health_hooks.append(hook)

    def figures(self) -> list[FeedFigures]:
        """The health hooks' figures (none from a hook that raised)."""
        found: list[FeedFigures] = []
        for hook in self._health_hooks:
            try:
                found.extend(hook())
            except Exception as error:  # a scrape must not fail for one hook
                log.warning("Metrics health hook %r failed: %s", hook, error)
        return found

    def generate(self) -> bytes:
        """The Prometheus text exposition of these metrics."""
        from prometheus_client import generate_latest

        return generate_latest(self.registry)

    def _call_hooks(self, hooks: Iterable[Callable[[], Mapping[str, Any]]]) -> dict[str, Any]:
        found: dict[str, Any] = {}
        for hook in hooks:
            try:
                found.update(hook())
            except Exception as error:  # a scrape must not fail for one hook
                log.warning("Metrics scrape hook %r failed: %s", hook, error)
        return found
