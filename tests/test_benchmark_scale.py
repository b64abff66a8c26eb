"""``python -m benchmarks scale`` at a tiny size: the feed is built and served
in both orders, every figure is measured, and the one table has its rows
(the sizes of the issue are a benchmark: ``docs/scale.rst``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.scale import paging, run
from benchmarks.scale.report import rows

pytestmark = [pytest.mark.server, pytest.mark.slow]

ROWS = (
    "build: insert_many (s)",
    "build: positions backfilled (s)",
    "build: the keeper's build begun (s)",
    "build: aggregates built (s)",
    "build: the keeper's build alone (s)",
    "commit-to-visible while they build: p50 / p99 / max ms (probes, missed)",
    "page first forward: DB CPU ms / queries / docs examined",
    "page middle forward: DB CPU ms / queries / docs examined",
    "page last forward: DB CPU ms / queries / docs examined",
    "page first descending: DB CPU ms / queries / docs examined",
    "page middle descending: DB CPU ms / queries / docs examined",
    "page last descending: DB CPU ms / queries / docs examined",
    "page DB CPU ÷ at 10,000 (worst page)",
    "crawl: pages / total (s)",
    "crawl: pages/s first / last tenth",
    "crawl: last ÷ first tenth",
    "rematerialize (s)",
    "in-sync: rounds / docs returned / ms (the copy's side too)",
    "in-sync docs ÷ at 100,000",
    "verify: s / client RSS MB",
    "RSS at the end: server (MB)",
    "RSS at the end: sequencer (MB)",
)


def test_the_scale_benchmark_prints_its_table_at_a_tiny_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(paging, "IDLE_SECONDS", 0.3)
    monkeypatch.setattr(paging, "BUDGET_SECONDS", 0.05)
    monkeypatch.setattr(paging, "MIN_READS", 1)
    saved = tmp_path / "scale.jsonl"
    assert run.main(["--sizes", "300", "--scale-save", str(saved), "--scale-workdir", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    for row in ROWS:
        assert row in printed, printed
    assert "300" in printed and "watermark" in printed and "commit" in printed
    figures = run.load(saved)
    assert [(one.size, one.order) for one in figures] == [(300, "watermark"), (300, "commit")]
    for one in figures:
        assert len(one.pages) == 6
        assert all(page.items == 100 for page in one.pages.values()), one.pages
        assert one.crawl["items"] == 300
        assert one.in_sync["rounds"] == 1 and one.in_sync["differences"] == 0
        assert one.verify["in_sync"], one.verify
        assert one.rss_mb["server"] > 0 and one.rss_mb["sequencer"] > 0
    # the commit feed's probes while the aggregates built are test tenders: positions too
    probes = int(figures[1].build.get("visible_probes", 0))
    assert 300 <= figures[1].rematerialize["entries"] <= 300 + probes
    assert len(rows(figures)) >= len(ROWS)
    json.dumps([one.crawl for one in figures])  # what --save writes
