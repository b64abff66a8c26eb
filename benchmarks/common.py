"""Helpers shared by the benchmarks: sample data, timing and tables."""

from __future__ import annotations

import random
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timezone
from typing import Any

from pymongo.collection import Collection

from openprocurement_feed.demo.load import sample_tender

#: Stamps of the sample documents start here (long past: the watermark lets
#: them all through).
BASE_STAMP = 1_700_000_000.0


def seed_tenders(collection: Collection, count: int, seed: int = 1, owners: int = 7, ties_every: int = 10) -> None:
    """Insert ``count`` realistic tenders as the store would have stamped them.

    One in ten is a test tender, one in twenty a draft (hidden); every
    ``ties_every``-th document shares its neighbour's ``public_modified``.
    ``owner`` takes ``owners`` values (for scoped feeds).
    """
    rng = random.Random(seed)
    docs = []
    stamp = BASE_STAMP
    for number in range(count):
        if number % ties_every:
            stamp += 0.01 + rng.randint(0, 50) / 1000
        data = sample_tender(rng)
        moment = datetime.fromtimestamp(stamp, timezone.utc).isoformat()
        status = "draft" if number % 20 == 7 else "active"
        mode = "test" if number % 10 == 3 else None
        data.update(
            _id=uuid.UUID(int=rng.getrandbits(128)).hex,
            _rev=f"1-{rng.getrandbits(128):032x}",
            dateCreated=moment,
            dateModified=moment,
            status=status,
            owner=f"owner-{number % owners}",
            public_modified=round(stamp, 3),
            is_public=status not in ("draft", "deleted"),
            is_test=mode == "test",
        )
        if mode:
            data["mode"] = mode
        docs.append(data)
    collection.insert_many(docs)


def insert_public_tenders(
    collection: Any,
    moments: Iterable[datetime],
    rng: random.Random,
    status: str | None = None,
    batch_size: int = 2000,
) -> dict[str, str]:
    """Insert a public tender shaped as the API stores it at each of
    ``moments`` (its ``dateModified`` and ``public_modified``), straight
    into the database in batches; their id → ``dateModified``."""
    versions: dict[str, str] = {}
    batch: list[dict[str, Any]] = []
    for number, moment in enumerate(moments):
        stamp = moment.isoformat()
        key = uuid.UUID(int=rng.getrandbits(128)).hex
        data = sample_tender(rng)
        data.pop("mode", None)
        data.update(
            _id=key,
            _rev=f"1-{rng.getrandbits(128):032x}",
            tenderID=f"UA-{moment:%Y-%m-%d}-{number:06d}-a",
            dateCreated=stamp,
            dateModified=stamp,
            status=status or data.get("status") or "active.tendering",
            owner="broker",
            public_modified=round(moment.timestamp(), 3),
            is_public=True,
            is_test=False,
        )
        batch.append(data)
        versions[key] = stamp
        if len(batch) == batch_size:
            collection.insert_many(batch)
            batch = []
    if batch:
        collection.insert_many(batch)
    return versions


def median_ms(samples: Sequence[float]) -> float:
    """The median of ``samples`` (seconds) in milliseconds."""
    return statistics.median(samples) * 1000


def percentile(samples: Sequence[float], fraction: float) -> float:
    """The ``fraction`` quantile of ``samples`` (nearest rank); 0 when empty."""
    if not samples:
        return 0.0
    ordered = sorted(samples)
    rank = min(len(ordered) - 1, max(0, round(fraction * len(ordered)) - 1))
    return ordered[rank]


def timed(call: Callable[[], Any]) -> float:
    """Seconds one call takes."""
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def cpu_timed(call: Callable[[], Any]) -> float:
    """CPU seconds this process spends on one call (the database is another
    process: its time is not counted)."""
    started = time.process_time()
    call()
    return time.process_time() - started


def wall_and_cpu(call: Callable[[], Any]) -> tuple[float, float]:
    """Wall seconds and this process's CPU seconds of one call."""
    wall, cpu = time.perf_counter(), time.process_time()
    call()
    return time.perf_counter() - wall, time.process_time() - cpu


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain-text table, first column left-aligned, the others right."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = []
    for index, row in enumerate(cells):
        parts = [row[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=False)]
        lines.append("  ".join(parts))
        if index == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def status(message: str) -> None:
    """A progress line on stderr."""
    print(message, file=sys.stderr, flush=True)
