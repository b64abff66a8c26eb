"""The orders charts, the production shape and the production-shaped
test's timeline, drawn from recorded figures (the runs themselves are
``python -m benchmarks orders --plot`` and ``ops/e2e.py --plot``)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ElementTree  # nosec B405 - files this test wrote
from pathlib import Path

import pytest

from benchmarks.orders import orders_delay_report
from openprocurement_feed.plots.__main__ import main as plots_main
from openprocurement_feed.race.results import RunResult, delay_samples, delay_summary
from tests.test_detector import run_result

pytest.importorskip("matplotlib")

from openprocurement_feed.plots.orders import plot_orders
from openprocurement_feed.plots.production import OpsRun, _alert_spans, plot_ops_timeline

SVG = "{http://www.w3.org/2000/svg}svg"


def svg_text(path: str | Path) -> str:
    """The text of an SVG file, checked to be one."""
    root = ElementTree.parse(path).getroot()  # nosec B314 - a file the test wrote
    assert root.tag == SVG
    return "".join(root.itertext())


def runs(order: str, delays: list[float], cpu_s: float, invisible: float | None = None) -> RunResult:
    result = run_result(
        1.0 if order == "watermark" else 0.0,
        order=order,
        patches=1000,
        database_cpu_s=cpu_s,
        longest_invisible_s=invisible,
    )
    result.delays = {"polling": delays, "longpoll": [value / 2 for value in delays]}
    return result


def test_the_three_orders_charts_are_drawn(tmp_path: Path) -> None:
    seed = {
        "watermark": [runs("watermark", [1000.0, 1010.0, 1200.0], 6.0)],
        "commit": [runs("commit", [90.0, 110.0], 7.0)],
    }
    hot = {"watermark": [runs("watermark", [], 3.0, 8.8)], "commit": [runs("commit", [], 5.0, 0.6)]}
    paths = plot_orders(seed, hot, str(tmp_path))
    assert [Path(path).name for path in paths] == ["orders-delay.svg", "orders-cpu.svg", "orders-hot.svg"]
    delay = svg_text(paths[0])
    # the legend carries each series' median and count
    assert "watermark W = 1 s, polling crawler (median 1010 ms, 3 versions)" in delay
    assert "commit order, long-poll crawler (median 50 ms, 2 versions)" in delay
    cpu = svg_text(paths[1])
    assert "6.00" in cpu and "7.00" in cpu and "3.00" in cpu and "5.00" in cpu  # ms per patch, each median
    hot_text = svg_text(paths[2])
    assert "8.81 s" not in hot_text and "8.80 s" in hot_text and "0.60 s" in hot_text


def test_without_hot_runs_two_charts(tmp_path: Path) -> None:
    seed = {"watermark": [runs("watermark", [1000.0], 6.0)], "commit": [runs("commit", [100.0], 7.0)]}
    paths = plot_orders(seed, {"watermark": [], "commit": []}, str(tmp_path), ".png")
    assert [Path(path).name for path in paths] == ["orders-delay.png", "orders-cpu.png"]
    assert all(Path(path).read_bytes().startswith(b"\x89PNG") for path in paths)


def test_the_delay_reports_figures_pool_the_rounds() -> None:
    seed = {
        "watermark": [runs("watermark", [1000.0, 1020.0], 6.0), runs("watermark", [1010.0], 6.0)],
        "commit": [runs("commit", [100.0], 7.0)],
    }
    text = orders_delay_report(seed)
    row = next(line for line in text.splitlines() if line.startswith("watermark") and "polling" in line)
    assert row.split()[2:4] == ["3", "1010"]


def test_delay_samples_are_sorted_and_summarised() -> None:
    from types import SimpleNamespace

    writers = [SimpleNamespace(acks=[("a", "v1", 10.0), ("a", "v2", 11.0), ("b", "v1", 10.5)])]
    crawler = SimpleNamespace(log=SimpleNamespace(seen={"a": {"v1": 10.2, "v2": 11.05}}))
    samples = delay_samples(writers, crawler)  # type: ignore[arg-type]
    assert samples == pytest.approx([50.0, 200.0])
    assert delay_summary(samples) == {"median": 125.0, "p99": 200.0, "max": 200.0, "count": 2}
    assert delay_summary([])["count"] == 0


def test_the_production_shape_is_drawn(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "shape.svg"
    assert plots_main(["shape", str(path), "--workers", "4"]) == 0
    text = svg_text(path)
    for box in ("gunicorn: web workers ×4", "sequencers ×2", "MongoDB replica set", "Prometheus", "crawlers"):
        assert box in text
    assert "change" in text and "stream" in text


def test_the_shape_refuses_another_extension(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        plots_main(["shape", "shape.gif"])
    assert exit_info.value.code == 2
    assert "must end in .svg or .png" in capsys.readouterr().err


def test_the_production_tests_timeline_is_drawn(tmp_path: Path) -> None:
    acks = {(f"t{n}", "v"): 10.0 + n / 10 for n in range(100)}
    seen = {version: moment + (5.0 if 14 <= moment < 16 else 0.1) for version, moment in acks.items()}
    checkpoints = [(float(t), 0.3 if not 14 <= t < 16 else t - 13.0) for t in range(10, 21)]
    events = [(12.0, "kill -9 web worker"), (13.0, "kill -9 sequencer a"), (14.0, "sequencer b stopped")]
    alerts = [(15.0, "pending"), (15.5, "firing"), (17.0, "inactive")]
    run = OpsRun(acks, seen, checkpoints, events, alerts, threshold=2)
    assert run.writes_per_second() == (list(range(10, 20)), [10] * 10)
    assert max(delay for _, delay in run.delays()) == pytest.approx(5.0)
    path = tmp_path / "timeline.svg"
    plot_ops_timeline(run, str(path))
    text = svg_text(path)
    for label in ("kill -9 web worker", "kill -9 sequencer a", "alert firing", "checkpoint age (s)", "writes/s"):
        assert label in text


def test_alert_spans() -> None:
    assert _alert_spans([(1.0, "pending"), (2.0, "firing"), (4.0, "inactive")]) == [
        (1.0, 2.0, "pending"),
        (2.0, 4.0, "firing"),
    ]
    assert _alert_spans([(1.0, "firing")]) == [(1.0, 2.0, "firing")]
    assert json.dumps(_alert_spans([])) == "[]"


def test_the_production_tests_plot_needs_svg_or_png(capsys: pytest.CaptureFixture[str]) -> None:
    import subprocess  # nosec B404 - the test runs its own interpreter
    import sys

    e2e = Path(__file__).resolve().parent.parent / "ops" / "e2e.py"
    child = subprocess.run(  # nosec B603 - our own interpreter and script
        [sys.executable, str(e2e), "--plot", "timeline.jpg"], capture_output=True, text=True, timeout=60
    )
    assert child.returncode == 2
    assert "test-ops: --plot: 'timeline.jpg': the picture's file name must end in .svg or .png" in child.stderr


@pytest.mark.parametrize(
    "argv",
    [
        ["-m", "openprocurement_feed.plots", "shape", "{dir}/shape.svg"],
        ["-m", "benchmarks", "orders", "--plot", "{dir}"],
    ],
    ids=["shape", "benchmark"],
)
def test_without_matplotlib_the_tools_name_the_extra(tmp_path: Path, argv: list[str]) -> None:
    import subprocess  # nosec B404 - the test runs its own interpreter
    import sys

    # The child cannot import matplotlib, as without the extra.
    code = (
        "import runpy, sys; sys.modules['matplotlib'] = None; "
        f"sys.argv = {[arg.format(dir=tmp_path) for arg in argv[1:]]!r}; "
        "runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)"
    )
    child = subprocess.run(  # nosec B603 - our own interpreter and code
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert child.returncode == 2, child.stderr
    assert "pip install 'openprocurement_feed[plot]'" in child.stderr
    assert "Traceback" not in child.stderr
    assert not list(tmp_path.iterdir())
