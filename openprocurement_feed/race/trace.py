"""What one run of the race experiment recorded, for its picture.

A :class:`RaceTrace` keeps, on one wall clock, every acknowledged write
(its ``public_modified`` stamp and the moment the API acknowledged it, just
after the commit), every page the polling crawler read with the newest stamp
it had reached, every version it was given, and the detector's anomalies.
:mod:`openprocurement_feed.plots.race` draws it; :func:`build_trace` makes
it from a run's writers, crawler and detector.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from .crawler import CrawlerLog
from .detector import CheckResult


@dataclass(frozen=True)
class WriteMark:
    """One acknowledged write: stamped at ``stamp``, acknowledged at ``acked``.

    ``stamp`` is the version's ``public_modified`` when a reader saw it, else
    its ``dateModified`` (the API's clock, taken just before the stamp).
    """

    id: str
    date_modified: str
    stamp: float
    acked: float

    @property
    def open_ms(self) -> float:
        """How long the write stayed open after its stamp (ms)."""
        return (self.acked - self.stamp) * 1000.0


@dataclass(frozen=True)
class ReadMark:
    """One page the polling crawler read: when, how many items, and the
    newest ``public_modified`` it had been given by then."""

    at: float
    items: int
    reached: float | None


@dataclass(frozen=True)
class Delivery:
    """A version the polling crawler was given first at ``at``."""

    id: str
    stamp: float
    at: float


@dataclass
class RaceTrace:
    """The events of one run, for :func:`openprocurement_feed.plots.race.plot_race`."""

    order: str
    watermark: float
    writes: list[WriteMark] = field(default_factory=list)
    reads: list[ReadMark] = field(default_factory=list)
    deliveries: list[Delivery] = field(default_factory=list)
    anomalies: list[CheckResult] = field(default_factory=list)

    @property
    def label(self) -> str:
        """How the run is named in a picture."""
        return "commit order" if self.order == "commit" else f"W = {self.watermark:g} s"

    def write_of(self, tender_id: str, stamp: float) -> WriteMark | None:
        """The write of ``tender_id`` whose stamp is closest to ``stamp``."""
        candidates = [write for write in self.writes if write.id == tender_id]
        return min(candidates, key=lambda write: abs(write.stamp - stamp), default=None)


def _iso_seconds(value: str) -> float | None:
    try:
        return datetime.fromisoformat(value).timestamp()
    except ValueError:
        return None


def build_trace(
    order: str,
    watermark: float,
    acks: Iterable[tuple[str, str, float]],
    log: CrawlerLog,
    anomalies: Sequence[CheckResult] = (),
) -> RaceTrace:
    """A run's trace from its writers' ``acks`` (``(id, dateModified,
    acked)``), the polling crawler's log and the detector's anomalies."""
    known: dict[tuple[str, str], float] = {
        (tender_id, version): stamp for tender_id, stamps in log.stamps.items() for version, stamp in stamps.items()
    }
    for result in anomalies:
        for item in (*result.snapshot, *result.late):
            known.setdefault((item.id, item.date_modified), item.public_modified)
    writes = []
    for tender_id, version, acked in acks:
        stamp = known.get((tender_id, version))
        if stamp is None:
            stamp = _iso_seconds(version)
        if stamp is not None:
            writes.append(WriteMark(tender_id, version, stamp, acked))
    writes.sort(key=lambda write: write.stamp)
    deliveries = sorted(
        (
            Delivery(tender_id, log.stamps.get(tender_id, {}).get(version, 0.0), moment)
            for tender_id, versions in log.seen.items()
            for version, moment in versions.items()
        ),
        key=lambda delivery: delivery.at,
    )
    reads = [ReadMark(at, items, reached) for at, items, reached in log.reads]
    return RaceTrace(order, watermark, writes, reads, deliveries, list(anomalies))
