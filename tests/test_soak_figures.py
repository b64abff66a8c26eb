"""The soak's arithmetic (benchmarks/soak): slopes, verdicts, the samples'
JSON lines and the minute's lines; no process is started."""

from __future__ import annotations

import dataclasses
import json

import pytest

from benchmarks.soak import object_collections
from benchmarks.soak.figures import Sample, judge, slope_per_hour
from benchmarks.soak.probes import OPLOG
from benchmarks.soak.report import minute_lines


def sample(minute: float, rss: float = 50.0, fds: int = 10, **extra: object) -> Sample:
    """A sample with one web worker and the given figures."""
    fields: dict[str, object] = dict(
        minute=minute,
        changes=int(minute * 60 * 20),
        creates=int(minute * 10),
        rate=20.0,
        processes={"web-1": (rss, fds)},
        connections=30,
        collections={OPLOG: (30_000, 0)},
    )
    fields.update(extra)
    return Sample(**fields)  # type: ignore[arg-type]


def verdict(verdicts: list, criterion: str, series: str):
    return next(v for v in verdicts if v.criterion.startswith(criterion) and v.series == series)


def test_the_slope_is_least_squares_per_hour():
    assert slope_per_hour([(0, 1.0), (30, 2.0), (60, 3.0)]) == pytest.approx(2.0)
    assert slope_per_hour([(0, 1.0), (60, 3.0)]) is None  # too few points


def test_a_process_that_grows_5_mb_an_hour_fails_and_a_flat_one_passes():
    growing = [sample(m, rss=50 + m * 6 / 60) for m in range(10, 61)]
    flat = [sample(m, rss=50 + (m % 2) * 0.5) for m in range(10, 61)]
    assert verdict(judge(growing, 10, 10, set(), ["web-1"], 30_000), "RSS", "web-1").ok is False
    assert verdict(judge(flat, 10, 10, set(), ["web-1"], 30_000), "RSS", "web-1").ok is True


def test_a_pool_that_grew_to_its_size_is_flat_and_a_leak_is_not():
    pool = [sample(m, fds=10 if m < 20 else 14) for m in range(10, 61)]
    leak = [sample(m, fds=10 + m // 5) for m in range(10, 61)]
    assert verdict(judge(pool, 10, 10, set(), ["web-1"], 30_000), "open fds", "web-1").ok is True
    assert verdict(judge(leak, 10, 10, set(), ["web-1"], 30_000), "open fds", "web-1").ok is False


def test_collections_may_grow_with_the_objects_but_not_with_the_changes():
    feed, aux = "openprocurement.tenders", "openprocurement.feed_health"
    records = "openprocurement.tenders_feed_reconcile"
    samples = [
        sample(
            m,
            collections={
                OPLOG: (30_000, 0),
                feed: (100 + m * 10, (100 + m * 10) * 2000),
                "openprocurement.tenders_feed_positions": (100 + m * 10, 365 * (100 + m * 10)),
                aux: (50 + m * 400, (50 + m * 400) * 150),
                # a record and two buckets per object, whatever the changes
                records: (300 + m * 30, (300 + m * 30) * 180),
            },
        )
        for m in range(10, 61)
    ]
    objects = object_collections({name for s in samples for name in s.collections})
    assert feed in objects and aux not in objects and objects[records] == 6
    verdicts = judge(samples, 10, 10, objects, ["web-1"], 30_000)
    assert verdict(verdicts, "grows with objects", feed).ok is True
    assert verdict(verdicts, "grows with objects", records).ok is True
    assert verdict(verdicts, "auxiliary", aux).ok is False
    # more documents per object than a record and its buckets: a leak
    leaking = [
        dataclasses.replace(s, collections={**s.collections, records: (s.collections[records][0] * 3, 0)})
        for s in samples
    ]
    verdicts = judge(leaking, 10, 10, objects, ["web-1"], 30_000)
    assert verdict(verdicts, "grows with objects", records).ok is False
    assert verdict(verdicts, "oplog", OPLOG).ok is True


def test_a_sample_survives_its_json_line_and_prints_its_figures():
    original = sample(3.0, errors={503: 2}, lag_p99_ms=120.0, load=4.2)
    again = Sample.from_json(json.loads(json.dumps(original.as_json())))
    assert again == original
    head, rss, fds, collections = minute_lines(again)
    assert "5xx 503: 2" in head and "machine load 4.2" in head and "p50/p99 -/120 ms" in head
    assert "web-1 50.0" in rss and "web-1 10" in fds and "local.oplog.rs 30,000" in collections
