"""What a scrape of the feeds' metrics reads: the stored values (this
process's registry or the multi-process files) with the values of the scrape
hooks, computed at scrape time, merged in, so that each metric name appears
once."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from .figures import VERDICTS, FeedFigures
from .metric_names import CHECKPOINT_AGE, CHECKPOINT_BEHIND, LAG_WINDOW, METRICS_ERRORS, VERDICT, WATCHER_AGE


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


class ScrapeCollector:
    """The custom collector a scrape reads: the stored values (this process's
    registry or the multi-process files) with the scrape hooks' values merged
    in, so that each metric name appears once.

    :param source: the collector of the stored values.
    :param ages: the checkpoint-age hooks' values, ``{collection: seconds}``.
    :param windows: the lag-window hooks' values, ``{collection: {"p50": s, ...}}``.
    :param figures: the health hooks' figures of every feed.
    :param errors: the count of values that could not be recorded.
    """

    def __init__(
        self,
        source: Any,
        ages: Callable[[], Mapping[str, Any]],
        windows: Callable[[], Mapping[str, Any]],
        figures: Callable[[], Iterable[FeedFigures]],
        errors: Callable[[], int],
    ) -> None:
        self.source = source
        self.ages = ages
        self.windows = windows
        self.figures = figures
        self.errors = errors

    def describe(self) -> list[Any]:
        return []  # computed at scrape time; nothing to check at registration

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        ages = {collection: float(age) for collection, age in self.ages().items() if age is not None}
        merged = False
        for family in self.source.collect():
            if family.name == CHECKPOINT_AGE and ages:
                yield self._ages_family(family.samples, ages)
                merged = True
            else:
                yield family
        if ages and not merged:
            yield self._ages_family((), ages)
        windows = self.windows()
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
        figures = list(self.figures())
        if figures:
            yield from self._health_families(figures)
        errors = CounterMetricFamily(
            METRICS_ERRORS, "Metric values this process could not record (logged).", value=self.errors()
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
