"""The orders benchmark's report: medians over the rounds, the worst hot
run's invisible time and the ratios commit / watermark, from the runs'
figures (the runs themselves are ``python -m benchmarks orders``)."""

from __future__ import annotations

from benchmarks.orders import orders_report
from openprocurement_feed.race.results import RunResult
from tests.test_detector import run_result


def run(order: str, rate: float, cpu_s: float, p50: float = 70.0, invisible: float | None = None) -> RunResult:
    """A run of ``order`` with these figures (1000 patches, no conflicts)."""
    return run_result(
        1.0 if order == "watermark" else 0.0,
        order=order,
        patches=1000,
        patches_per_second=rate,
        database_cpu_s=cpu_s,
        feed_delay_ms={"median": p50, "p99": 2 * p50},
        longest_invisible_s=invisible,
    )


def line(report: str, label: str) -> list[str]:
    found = [row for row in report.splitlines() if row.startswith(label)]
    assert len(found) == 1, report
    return found[0][len(label) :].split()


def test_the_report_gives_medians_worst_invisible_and_ratios() -> None:
    runs = {
        "watermark": [run("watermark", 80.0, 6.0, 1000.0), run("watermark", 79.0, 7.0, 1010.0)],
        "commit": [run("commit", 80.0, 7.0), run("commit", 78.0, 9.0)],
    }
    hot = {
        "watermark": [run("watermark", 145.0, 5.0, invisible=16.0), run("watermark", 147.0, 5.0, invisible=15.9)],
        "commit": [run("commit", 118.0, 7.0, invisible=0.3), run("commit", 122.0, 8.0, invisible=0.5)],
    }
    main, hot_part = orders_report(runs, hot, 15.0).split("Hot documents")

    assert line(main, "commit #2") == ["78.0", "9.00", "70", "140", "0", "0"]
    assert line(main, "patches/s reached") == ["79.50", "79.00", "0.99"]
    assert line(main, "database CPU per patch (ms)") == ["6.50", "8.00", "1.23"]
    assert line(main, "feed delay p50 (ms)") == ["1005.00", "70.00", "0.07"]
    assert line(hot_part, "commit #1") == ["118.0", "7.00", "0.30", "0"]
    assert line(hot_part, "patches/s reached (median)") == ["146.00", "120.00", "0.82"]
    assert line(hot_part, "database CPU per patch (ms, median)") == ["5.00", "7.50", "1.50"]
    assert line(hot_part, "longest invisible (s, worst run)") == ["16.00", "0.50", "0.03"]


def test_the_report_leaves_out_the_hot_part_without_hot_runs() -> None:
    runs = {"watermark": [run("watermark", 80.0, 6.0, 1000.0)], "commit": [run("commit", 80.0, 7.0)]}
    report = orders_report(runs, {"watermark": [], "commit": []}, 15.0)
    assert "Hot documents" not in report
    assert line(report, "database CPU per patch (ms)") == ["6.00", "7.00", "1.17"]
