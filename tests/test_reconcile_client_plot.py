"""The reconcile cost figure and the benchmark's report, drawn from recorded
figures (the run itself is ``python -m benchmarks reconcile-client``)."""

from __future__ import annotations

import xml.etree.ElementTree as ElementTree  # nosec B405 - files this test wrote
from pathlib import Path

import pytest

from benchmarks.reconcile_client.cost import CostRow, cost_report, damaged
from benchmarks.reconcile_client.results import load_results, save_results

pytest.importorskip("matplotlib")

from openprocurement_feed.plots.reconcile import plot_reconcile_cost

FULL = 9_300_000


def rows() -> list[CostRow]:
    return [
        CostRow(order, k, 1 if k == 0 else 3, 400 + 150 * k, 100 + 250 * k, k // 2, 400 * k, FULL, True, 1.0)
        for order in ("watermark", "commit")
        for k in (0, 1, 10, 100)
    ]


def test_the_figure_shows_both_orders_beside_the_full_crawl(tmp_path: Path) -> None:
    path = tmp_path / "reconcile-cost.svg"
    assert plot_reconcile_cost(rows(), 100_000, str(path)) == str(path)
    root = ElementTree.parse(path).getroot()  # nosec B314 - a file the test wrote
    text = "".join(root.itertext())
    assert "check, watermark order" in text and "check, commit order" in text
    assert "full crawl of the items (9.3 MB)" in text and "5 % of the full crawl" in text
    assert "rounds of a check" in text and "100,000 tenders" in text


def test_the_report_judges_the_ceiling_and_the_results_round_trip(tmp_path: Path) -> None:
    report = cost_report(rows(), 100_000)
    assert "every copy reported exactly: yes" in report and "0.44%" in report  # 40.5 kB of 9.3 MB at k=100
    over = [*rows(), CostRow("commit", 100, 9, FULL, 0, 0, 0, FULL, True, 1.0)]
    assert "every copy reported exactly: NO" in cost_report(over, 100_000)
    saved = tmp_path / "results.jsonl"
    scenario = {"order": "commit", "first": {"missing": []}}
    save_results(str(saved), rows(), [scenario])
    assert load_results([str(saved)]) == (rows(), [scenario])


def test_a_damaged_copy_has_the_issues_proportions() -> None:
    versions = {f"{number:032x}": f"2026-01-01T00:00:{number % 60:02d}+00:00" for number in range(1, 500)}
    copy, missing, stale, extra = damaged(versions, 110, seed=1)
    assert (len(missing), len(stale), len(extra)) == (50, 50, 10)
    assert not set(missing) & set(copy) and all(copy[key] < versions[key] for key in stale)
    assert all(key in copy and key not in versions for key in extra)
