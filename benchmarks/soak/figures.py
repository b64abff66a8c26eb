"""The soak's figures: one :class:`Sample` a minute, the least-squares
slope of every series after the warm-up, and a verdict per criterion of the
steady state (docs/operations.rst, "The steady state")."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from .probes import OPLOG

#: Every process's RSS may grow less than this after the warm-up (MB/h).
RSS_LIMIT_MB_PER_HOUR = 5.0
#: Open descriptors and connections are flat when their trend is below
#: this many per hour (one leaked a quarter of an hour fails).
COUNT_LIMIT_PER_HOUR = 4.0
#: An auxiliary collection stops growing with the changes when it grows
#: by less than this per change (bytes).
BYTES_PER_CHANGE_LIMIT = 1.0
#: An object collection's bytes per document may not grow more than this
#: share of its mean per hour.
BYTES_PER_DOC_SHARE_PER_HOUR = 0.01
#: A p99 has a trend when it grows more than this share of its median per
#: hour, and more than :data:`TREND_FLOOR_MS`.
TREND_SHARE_PER_HOUR = 0.5
TREND_FLOOR_MS = 50.0


@dataclass
class Sample:
    """The shape at one minute (``minute``: since the writers started)."""

    minute: float
    changes: int
    creates: int
    rate: float
    processes: dict[str, tuple[float, int]] = field(default_factory=dict)
    connections: int | None = None
    collections: dict[str, tuple[int, int]] = field(default_factory=dict)
    lag_p50_ms: float | None = None
    lag_p99_ms: float | None = None
    poll_p99_ms: float | None = None
    sequencer_p99_ms: float | None = None
    request_p99_ms: float | None = None
    requests: int = 0
    errors: dict[int, int] = field(default_factory=dict)
    verdict: str = ""
    #: the machine's load average over the last minute (other work included)
    load: float | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Sample:
        """A sample from a line of ``samples.jsonl`` (:meth:`as_json`)."""
        fields = dict(data)
        fields["processes"] = {role: (float(rss), int(fds)) for role, (rss, fds) in data["processes"].items()}
        fields["collections"] = {name: (int(d), int(b)) for name, (d, b) in data["collections"].items()}
        fields["errors"] = {int(status): count for status, count in data.get("errors", {}).items()}
        return cls(**fields)

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["errors"] = {str(status): count for status, count in self.errors.items()}
        return data


def slope_per_hour(points: Sequence[tuple[float, float]]) -> float | None:
    """The least-squares slope of ``(minute, value)`` points, per hour;
    None with fewer than 3 points or a single moment."""
    if len(points) < 3 or len({x for x, _ in points}) < 2:
        return None
    fitted = statistics.linear_regression([x / 60.0 for x, _ in points], [y for _, y in points])
    return float(fitted.slope)


@dataclass
class Verdict:
    """One criterion on one series after the warm-up."""

    criterion: str
    series: str
    first: float | None
    last: float | None
    slope: float | None
    limit: str
    ok: bool | None  # None: not judged (too few samples)
    note: str = ""

    @property
    def word(self) -> str:
        return {True: "ok", False: "FAIL", None: "not judged"}[self.ok]


def series(samples: Sequence[Sample], value: Callable[[Sample], float | None]) -> list[tuple[float, float]]:
    """``(minute, value)`` of the samples where ``value`` is known."""
    points = []
    for sample in samples:
        found = value(sample)
        if found is not None:
            points.append((sample.minute, float(found)))
    return points


def _verdict(
    criterion: str, name: str, points: list[tuple[float, float]], limit: str, test: Callable[[float], bool]
) -> Verdict:
    slope = slope_per_hour(points)
    return Verdict(
        criterion,
        name,
        points[0][1] if points else None,
        points[-1][1] if points else None,
        slope,
        limit,
        None if slope is None else test(slope),
    )


def judge(
    samples: Sequence[Sample],
    warm_up: float,
    database_from: float | None,
    object_collections: Mapping[str, int],
    judged_processes: Sequence[str],
    oplog_bound: int,
) -> list[Verdict]:
    """Every criterion's verdict on the samples after ``warm_up`` minutes
    (the database's RSS after ``database_from``, when its oplog reached its
    bound; None: never)."""
    steady = [sample for sample in samples if sample.minute >= warm_up]
    verdicts: list[Verdict] = []
    roles = sorted({role for sample in steady for role in sample.processes})
    for role in roles:
        start = warm_up if role != "database" else database_from
        points = series([s for s in steady if start is not None and s.minute >= start], rss_of(role))
        verdict = _verdict("RSS grows < 5 MB/h", role, points, "< 5 MB/h", lambda s: s < RSS_LIMIT_MB_PER_HOUR)
        if role == "database":
            verdict.note = "not at its oplog bound" if database_from is None else f"from minute {database_from:g}"
        if role not in judged_processes:
            verdict.ok, verdict.note = None, "the soak itself (keeps every version it saw)"
        verdicts.append(verdict)
    for role in roles:
        verdicts.append(_flat("open fds flat", role, series(steady, fds_of(role))))
        if role not in judged_processes:
            verdicts[-1].ok = None
    verdicts.append(_flat("connections flat", "database", series(steady, field_of("connections"))))
    oplog_steady = [s for s in steady if database_from is not None and s.minute >= database_from]
    verdicts.extend(_collection_verdicts(steady, object_collections, oplog_steady, oplog_bound))
    for name, attribute in TIMINGS:
        points = series(steady, field_of(attribute))
        median = statistics.median([y for _, y in points]) if points else 0.0
        bound = max(TREND_SHARE_PER_HOUR * median, TREND_FLOOR_MS)
        verdicts.append(_verdict("p99 shows no trend", name, points, f"< {bound:.0f} ms/h", bound.__gt__))
    return verdicts


#: The timings judged for a trend: label and :class:`Sample` attribute.
TIMINGS = (
    ("commit-to-visible p99 (long poll)", "lag_p99_ms"),
    ("commit-to-visible p99 (polling)", "poll_p99_ms"),
    ("request p99", "request_p99_ms"),
)


def field_of(attribute: str) -> Callable[[Sample], float | None]:
    """A sample's ``attribute``."""
    return lambda sample: getattr(sample, attribute)


def collection_figure(name: str, index: int, scale: float = 1.0) -> Callable[[Sample], float | None]:
    """A sample's documents (``index`` 0) or bytes (1) of collection ``name``."""
    return lambda sample: sample.collections[name][index] / scale if name in sample.collections else None


def rss_of(role: str) -> Callable[[Sample], float | None]:
    return lambda sample: sample.processes[role][0] if role in sample.processes else None


def fds_of(role: str) -> Callable[[Sample], float | None]:
    return lambda sample: sample.processes[role][1] if role in sample.processes else None


def _flat(criterion: str, name: str, points: list[tuple[float, float]]) -> Verdict:
    """A count is flat when its trend is below :data:`COUNT_LIMIT_PER_HOUR`,
    or when its second half never goes above the first half's highest (a
    pool that grew to its size and stayed there; a leak keeps setting new
    highs)."""
    limit = f"|trend| < {COUNT_LIMIT_PER_HOUR:g}/h or no new high"
    verdict = _verdict(criterion, name, points, limit, lambda slope: abs(slope) < COUNT_LIMIT_PER_HOUR)
    if verdict.slope is None:
        return verdict
    half = len(points) // 2
    first, second = max(y for _, y in points[:half]), max(y for _, y in points[half:])
    verdict.ok = abs(verdict.slope) < COUNT_LIMIT_PER_HOUR or second <= first
    verdict.note = f"range {min(y for _, y in points):g}-{max(y for _, y in points):g}"
    return verdict


def _oplog_verdict(points: list[tuple[float, float]], bound: int) -> Verdict:
    """The oplog stays within 5 % of its bound of entries (it is pruned
    now and then, not at each write)."""
    verdict = _verdict("oplog stays at its bound", OPLOG, points, f"entries <= 1.05 x {bound:,}", lambda s: True)
    if points:
        highest = max(y for _, y in points)
        verdict.ok = highest <= 1.05 * bound
        verdict.note = f"entries {min(y for _, y in points):,.0f}-{highest:,.0f}"
    else:
        verdict.ok, verdict.note = None, "never at its bound"
    return verdict


def _collection_verdicts(
    steady: Sequence[Sample], object_collections: Mapping[str, int], oplog_steady: Sequence[Sample], oplog_bound: int
) -> list[Verdict]:
    """Object collections (the feed, its positions, the keys, the reconcile
    records: name → documents per object): documents grow with the creates
    only (times that) and bytes per document do not grow.
    Auxiliary ones: bytes do not grow with the changes, documents at most
    with the creates (the oplog from when it reached its bound,
    ``oplog_steady``)."""
    verdicts = []
    changes = slope_per_hour(series(steady, lambda s: s.changes)) or 0.0
    creates = slope_per_hour(series(steady, lambda s: s.creates)) or 0.0
    names = sorted({name for sample in steady for name in sample.collections})
    for name in names:
        if name == OPLOG:
            verdicts.append(_oplog_verdict(series(oplog_steady, collection_figure(name, 0)), oplog_bound))
            continue
        window = steady
        docs = series(window, collection_figure(name, 0))
        size = series(window, collection_figure(name, 1))
        if name in object_collections:
            per_doc = [(x, y / d) for (x, y), (_, d) in zip(size, docs, strict=True) if d]
            mean = statistics.mean([y for _, y in per_doc]) if per_doc else 0.0
            each = object_collections[name]
            verdict = _verdict(
                "grows with objects, not changes",
                name,
                docs,
                f"docs/h <= {each if each > 1 else ''}{' x ' if each > 1 else ''}creates/h ({creates:.0f}) + 2%",
                lambda s: s <= each * creates * 1.02 + 1,
            )
            per_doc_slope = slope_per_hour(per_doc)
            if per_doc_slope is not None and verdict.ok is not None:
                # several kinds of documents of fixed fields (records and
                # buckets): their mean size follows their mix, not a growth
                grows = each == 1 and per_doc_slope > BYTES_PER_DOC_SHARE_PER_HOUR * mean
                verdict.ok = verdict.ok and not grows
                verdict.note = f"bytes/doc {mean:.0f}, {per_doc_slope:+.1f}/h" + ("" if each == 1 else " (a mix)")
            verdicts.append(verdict)
            continue
        doc_slope, byte_slope = slope_per_hour(docs), slope_per_hour(size)
        verdict = _verdict(
            "auxiliary: stops growing with changes",
            name,
            size,
            f"< {BYTES_PER_CHANGE_LIMIT:g} B per change, docs/h <= creates/h",
            lambda s: changes > 0 and s / changes < BYTES_PER_CHANGE_LIMIT,
        )
        if doc_slope is not None and byte_slope is not None and changes > 0:
            verdict.ok = bool(verdict.ok) and doc_slope <= creates * 1.02 + 1
            verdict.note = f"{byte_slope / changes:+.3f} B per change, docs {doc_slope:+.0f}/h"
        verdicts.append(verdict)
    return verdicts
