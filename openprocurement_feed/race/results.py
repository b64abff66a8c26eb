"""What a run of the race experiment found: its :class:`RunResult` (the
writes, the detector's checks, what each crawler received and lost, the
feed delays, the database's CPU), and the figures drawn from the writers'
acknowledgements and a crawler's log."""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from typing import Any

from .crawler import Crawler
from .load import LoggingWriter
from .trace import RaceTrace


@dataclass
class RunResult:
    """The figures of one run (see :func:`run_once`); ``to_dict`` is the JSON form."""

    watermark: float
    duration: float
    tenders: int
    writers: int
    write_delay_ms: str
    patches: int
    write_errors: int
    patches_per_second: float
    checks: int
    failures: int
    failure_percent: float
    lags_ms: list[float]
    check_errors: int
    crawler_items: int
    lost: int
    lost_ids: list[str]
    duplicates: int
    crawler_errors: int
    feed_delay_ms: dict[str, float | None] = field(default_factory=dict)
    order: str = "watermark"
    write_conflicts: int = 0
    hot: bool = False
    longest_invisible_s: float | None = None
    sequencer: dict[str, Any] | None = None
    #: CPU seconds the database process used while the writers ran (None
    #: when it is not a process of this machine)
    database_cpu_s: float | None = None
    #: the long-poll crawler's figures, as the polling crawler's above
    #: (``longpoll_lost`` is None when the run had no long-poll crawler)
    longpoll_items: int = 0
    longpoll_lost: int | None = None
    longpoll_lost_ids: list[str] = field(default_factory=list)
    longpoll_duplicates: int = 0
    longpoll_errors: int = 0
    longpoll_delay_ms: dict[str, float | None] = field(default_factory=dict)
    #: the run's events for its picture (``race --plot``); not in ``to_dict``
    trace: RaceTrace | None = field(default=None, repr=False, compare=False)
    #: every delivered version's feed delay (ms, sorted) per crawler
    #: (``polling``, ``longpoll``), for the orders charts; not in ``to_dict``
    delays: dict[str, list[float]] = field(default_factory=dict, repr=False, compare=False)

    @property
    def database_cpu_ms_per_patch(self) -> float | None:
        """The database's CPU per acknowledged patch (ms), crawler and
        sequencer included."""
        if self.database_cpu_s is None or not self.patches:
            return None
        return round(self.database_cpu_s * 1000.0 / self.patches, 2)

    @property
    def lag_summary(self) -> dict[str, float | None]:
        """``min``, ``max`` and ``mean`` of the late-arrival lags (ms)."""
        if not self.lags_ms:
            return {"min": None, "max": None, "mean": None}
        return {
            "min": min(self.lags_ms),
            "max": max(self.lags_ms),
            "mean": round(statistics.fmean(self.lags_ms), 1),
        }

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("trace", None)
        data.pop("delays", None)
        data["lag_summary_ms"] = self.lag_summary
        data["database_cpu_ms_per_patch"] = self.database_cpu_ms_per_patch
        return data


def delay_samples(writers: list[LoggingWriter], crawler: Crawler) -> list[float]:
    """How long after its acknowledgement each version the crawler saw was
    delivered to it (ms, sorted; versions overwritten before they became
    visible have no delay)."""
    delays = []
    for writer in writers:
        for tender_id, date_modified, acked in writer.acks:
            seen = crawler.log.seen.get(tender_id, {}).get(date_modified)
            if seen is not None:
                delays.append(max(0.0, seen - acked) * 1000.0)
    return sorted(delays)


def delay_summary(delays: list[float]) -> dict[str, float | None]:
    """Median, p99 and max (ms) of sorted ``delays``, and their count."""
    if not delays:
        return {"median": None, "p99": None, "max": None, "count": 0}
    return {
        "median": round(statistics.median(delays), 1),
        "p99": round(delays[min(len(delays) - 1, int(len(delays) * 0.99))], 1),
        "max": round(delays[-1], 1),
        "count": len(delays),
    }


def lost(finals: dict[str, str], crawler: Crawler) -> list[str]:
    """The ids of the tenders whose final version (``finals[id]``, its
    ``dateModified``) ``crawler`` never saw, sorted."""
    return sorted(tender_id for tender_id, final in finals.items() if not crawler.log.saw(tender_id, final))


def longest_invisible(writers: list[LoggingWriter], crawler: Crawler, until: float) -> float | None:
    """The longest time (s) a tender's acknowledged change stayed invisible:
    from a patch's acknowledgement until the crawler was given that version
    or a newer one of the same tender (``until`` for a change it never saw
    by the end of the run)."""
    longest = None
    for writer in writers:
        for tender_id, date_modified, acked in writer.acks:
            seen = crawler.log.seen.get(tender_id, {})
            covered = [moment for version, moment in seen.items() if version >= date_modified]
            shown = min(covered) if covered else until
            gap = max(0.0, shown - acked)
            longest = gap if longest is None else max(longest, gap)
    return None if longest is None else round(longest, 2)
