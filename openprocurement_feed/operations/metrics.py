"""Prometheus metrics of the feeds (the optional ``metrics`` extra).

With ``feed.metrics_path`` set, :func:`include_metrics` (called by the
include) registers:

* ``registry.feed_metrics`` — a :class:`FeedMetrics`, the app's metrics (its
  own ``CollectorRegistry``, or the files of ``PROMETHEUS_MULTIPROC_DIR`` in
  multi-process mode); other parts of the app feed it through
  :meth:`FeedMetrics.observe_lag`, :meth:`FeedMetrics.set_checkpoint_age` and
  the scrape hooks;
* the route ``openprocurement_feed.metrics`` at ``feed.metrics_path``, whose
  view answers the Prometheus text format (permission
  ``feed.metrics_permission`` when set);
* the tween :func:`metrics_tween_factory`, just over Pyramid's exception view
  tween, which counts and times every feed request.

Recording a value never fails its caller: an error of prometheus_client
(a multi-process value with no folder, a full disk) is logged, counted in
:attr:`FeedMetrics.errors` and reported by the scrape as
``openprocurement_feed_metrics_errors_total``; the request is answered and
the sequencer follows on.

With ``feed.metrics_path`` empty the include registers none of this (and
``registry.feed_metrics`` is None): metrics cost nothing. ``prometheus_client``
is imported only here, when the metrics are on; without it start-up fails with
a :class:`~pyramid.exceptions.ConfigurationError`.

Multi-process mode (gunicorn-style workers) follows prometheus_client: set
``PROMETHEUS_MULTIPROC_DIR`` to an empty directory before the processes start;
every process writes its values to files there and a scrape of any worker
aggregates them. Counters and histograms add up; the checkpoint-age gauge
reports the most recently set value. Values computed at scrape time by the
scrape hooks come from shared state (the database), so every worker reports
them alike.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, TypeVar

from pyramid.config import Configurator
from pyramid.exceptions import ConfigurationError
from pyramid.request import Request
from pyramid.response import Response
from pyramid.tweens import EXCVIEW

from ..feed.views import ITEMS_KEY, feed_route_name
from .figures import VERDICTS, FeedFigures

log = logging.getLogger("openprocurement_feed.metrics")  # its name from before the package had subpackages

PAGES = "openprocurement_feed_pages_total"
ITEMS = "openprocurement_feed_items_total"
PAGE_SECONDS = "openprocurement_feed_page_seconds"
COMMIT_LAG = "openprocurement_feed_commit_lag_seconds"
CHECKPOINT_AGE = "openprocurement_feed_checkpoint_age_seconds"
LAG_WINDOW = "openprocurement_feed_lag_window_seconds"
LONGPOLL_WAITERS = "openprocurement_feed_longpoll_waiters"
LONGPOLL_WAKEUPS = "openprocurement_feed_longpoll_wakeups_total"
LONGPOLL_TIMEOUTS = "openprocurement_feed_longpoll_timeouts_total"
LONGPOLL_OVER_CAP = "openprocurement_feed_longpoll_over_cap_total"
VERDICT = "openprocurement_feed_verdict"
WATCHER_AGE = "openprocurement_feed_watcher_age_seconds"
CHECKPOINT_BEHIND = "openprocurement_feed_checkpoint_behind_seconds"
METRICS_ERRORS = "openprocurement_feed_metrics_errors_total"
RECONCILE_SESSIONS = "openprocurement_feed_reconcile_sessions_total"
RECONCILE_ROUNDS = "openprocurement_feed_reconcile_rounds_total"
RECONCILE_BYTES = "openprocurement_feed_reconcile_bytes_total"
RECONCILE_DIFFERENCES = "openprocurement_feed_reconcile_differences_total"

#: Page latency buckets: 1 ms to 5 s.
PAGE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
#: Start-to-commit lag buckets: 1 ms to 10 s.
LAG_BUCKETS = (*PAGE_BUCKETS, 10.0)
#: The environment variable of prometheus_client's multi-process mode.
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
ROUTE_NAME = "openprocurement_feed.metrics"
INSTALL_HINT = "pip install 'openprocurement_feed[metrics]'"

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


def quantile_label(key: str) -> str | None:
    """The ``quantile`` label of a lag-window key: ``p50`` → ``0.5``,
    ``p99`` → ``0.99``, ``max`` → ``1``; None for anything else."""
    if key == "max":
        return "1"
    if key.startswith("p"):
        try:
            number = float(key[1:])
        except ValueError:
            return None
        if 0 <= number <= 100:
            return f"{number / 100:g}"
    return None


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
        self.registry.register(_ScrapeCollector(self))

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


class _ScrapeCollector:
    """The custom collector a scrape reads: the stored values (this process's
    registry or the multi-process files) with the scrape hooks' values merged
    in, so that each metric name appears once."""

    def __init__(self, metrics: FeedMetrics) -> None:
        self.metrics = metrics

    def describe(self) -> list[Any]:
        return []  # computed at scrape time; nothing to check at registration

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        metrics = self.metrics
        ages = {
            collection: float(age)
            for collection, age in metrics._call_hooks(metrics._age_hooks).items()
            if age is not None
        }
        merged = False
        for family in metrics._source.collect():
            if family.name == CHECKPOINT_AGE and ages:
                yield self._ages_family(family.samples, ages)
                merged = True
            else:
                yield family
        if ages and not merged:
            yield self._ages_family((), ages)
        windows = metrics._call_hooks(metrics._window_hooks)
        if windows:
            family = GaugeMetricFamily(
                LAG_WINDOW,
                "Start-to-commit lag over the recent window, in seconds.",
                labels=["collection", "quantile"],
            )
            for collection, quantiles in windows.items():
                for key, seconds in (quantiles or {}).items():
                    label = quantile_label(key)
                    if label is not None and seconds is not None:
                        family.add_metric([collection, label], float(seconds))
            yield family
        figures = metrics.figures()
        if figures:
            yield from self._health_families(figures)
        errors = CounterMetricFamily(
            METRICS_ERRORS, "Metric values this process could not record (logged).", value=metrics.errors
        )
        yield errors

    @staticmethod
    def _health_families(figures: Iterable[FeedFigures]) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        verdict = GaugeMetricFamily(
            VERDICT,
            "The health view's verdict of a feed: 1 for its verdict, 0 for the others.",
            labels=["feed", "verdict"],
        )
        watcher = GaugeMetricFamily(
            WATCHER_AGE,
            "Seconds since a follower (sequencer or observer) of the collection last published its figures.",
            labels=["collection"],
        )
        behind = GaugeMetricFamily(
            CHECKPOINT_BEHIND,
            "Seconds a commit-ordered feed's checkpoint trails the newest public write of its collection.",
            labels=["collection"],
        )
        collections: set[str] = set()
        for item in figures:
            for name in VERDICTS:
                verdict.add_metric([item.feed, name], 1.0 if name == item.verdict else 0.0)
            if item.collection in collections:
                continue
            collections.add(item.collection)
            if item.watcher_age is not None:
                watcher.add_metric([item.collection], float(item.watcher_age))
            if item.checkpoint_behind is not None:
                behind.add_metric([item.collection], float(item.checkpoint_behind))
        yield verdict
        if watcher.samples:
            yield watcher
        if behind.samples:
            yield behind

    @staticmethod
    def _ages_family(samples: Iterable[Any], ages: Mapping[str, float]) -> Any:
        from prometheus_client.core import GaugeMetricFamily

        family = GaugeMetricFamily(
            CHECKPOINT_AGE,
            "Age of a commit-ordered feed's checkpoint in seconds.",
            labels=["collection"],
        )
        for sample in samples:
            collection = sample.labels.get("collection", "")
            if collection not in ages:
                family.add_metric([collection], sample.value)
        for collection, age in sorted(ages.items()):
            family.add_metric([collection], age)
        return family


def metrics_tween_factory(handler: Callable[[Request], Response], registry: Any) -> Callable[[Request], Response]:
    """The tween that counts and times feed requests.

    A tween rather than a wrapper of the feed view: placed over the
    exception view tween, it sees the final response of every feed request,
    the cornice 400/404 answers of the validator (which never reach the
    view) and the 503s that exception views render, with the routing and
    rendering time included. It knows a feed request by its matched route
    after the handler returns, so any other request costs one clock read and
    one dictionary miss, and is not counted.
    """
    metrics: FeedMetrics = registry.feed_metrics
    routes = {feed_route_name(name): name for name in registry.feed_definitions}
    clock = time.perf_counter

    def feed_of(request: Request) -> str | None:
        route = request.matched_route
        return routes.get(route.name) if route is not None else None

    def tween(request: Request) -> Response:
        started = clock()
        try:
            response = handler(request)
        except Exception:  # no exception view answered it: the server says 500
            feed = feed_of(request)
            if feed is not None:
                metrics.observe_page(feed, 500, clock() - started)
            raise
        feed = feed_of(request)
        if feed is not None:
            status = response.status_int
            items = request.environ.get(ITEMS_KEY, 0) if status == 200 else 0
            metrics.observe_page(feed, status, clock() - started, items)
        return response

    return tween


def metrics_view(request: Request) -> Response:
    """The Prometheus text exposition of the app's metrics."""
    from prometheus_client import CONTENT_TYPE_LATEST

    response = Response(body=request.registry.feed_metrics.generate())
    response.headers["Content-Type"] = CONTENT_TYPE_LATEST
    response.cache_control = "no-store"
    return response


def require_prometheus_client(setting: str = "feed.metrics_path") -> None:
    """Fail with a ConfigurationError naming ``setting`` and the extra to
    install when prometheus_client cannot be imported."""
    try:
        import prometheus_client  # noqa: F401
    except ImportError as error:
        raise ConfigurationError(
            f"The setting {setting!r} turns the Prometheus metrics on, but "
            f"prometheus_client is not installed ({error}): {INSTALL_HINT}"
        ) from None


def include_metrics(config: Configurator, path: str, permission: str | None = None) -> FeedMetrics:
    """Register ``registry.feed_metrics``, the metrics route and view at
    ``path`` (with ``permission``) and the feed tween; return the metrics."""
    require_prometheus_client()
    metrics = FeedMetrics.from_environ(os.environ)
    config.registry.feed_metrics = metrics
    config.add_route(ROUTE_NAME, path)
    config.add_view(metrics_view, route_name=ROUTE_NAME, request_method="GET", permission=permission)
    config.add_tween("openprocurement_feed.operations.metrics.metrics_tween_factory", over=EXCVIEW)
    return metrics
