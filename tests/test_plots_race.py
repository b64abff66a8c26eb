"""The race picture: ``race --plot`` and the drawing of recorded traces.

The drawing is checked on a trace recorded by hand (the crossing of a
write's commit under a reader's offset is placed where the test wants it)
and on a real short run over the test database; a missing ``plot`` extra
is simulated in a child process that cannot import matplotlib.
"""

from __future__ import annotations

import os
import subprocess  # nosec B404 - the test runs its own interpreter
import sys
import xml.etree.ElementTree as ElementTree  # nosec B405 - our own file
from pathlib import Path

import pytest

from openprocurement_feed.cli import main as cli_main
from openprocurement_feed.plots import PlotExtraMissing, image_format
from openprocurement_feed.race.crawler import CrawlerLog
from openprocurement_feed.race.detector import CheckResult
from openprocurement_feed.race.feed import FeedItem
from openprocurement_feed.race.trace import build_trace

pytest.importorskip("matplotlib")

from openprocurement_feed.plots.race import panels, plot_race

SVG = "{http://www.w3.org/2000/svg}svg"
T0 = 1_800_000_000.0


def recorded_run() -> tuple[list[tuple[str, str, float]], CrawlerLog, list[CheckResult]]:
    """A W = 0 run as the experiment records it: ``b`` is stamped at
    T0 + 0.100 and acknowledged at T0 + 0.180; a reader saw ``a`` (stamped
    T0 + 0.120) at T0 + 0.150, so ``b`` arrived behind it."""
    acks = [("a", "va", T0 + 0.125), ("b", "vb", T0 + 0.180), ("c", "vc", T0 + 0.300)]
    log = CrawlerLog()
    log.stamps = {"a": {"va": T0 + 0.120}, "c": {"vc": T0 + 0.290}}
    log.seen = {"a": {"va": T0 + 0.160}, "c": {"vc": T0 + 0.320}}
    log.reads = [(T0 + 0.160, 1, T0 + 0.120), (T0 + 0.320, 1, T0 + 0.290)]
    late = FeedItem("b", T0 + 0.100, "vb")
    anomaly = CheckResult(T0 + 0.400, (FeedItem("a", T0 + 0.120, "va"),), (late,), 2, taken=T0 + 0.150)
    return acks, log, [anomaly]


def test_the_trace_keeps_each_writes_stamp_and_commit() -> None:
    acks, log, anomalies = recorded_run()
    trace = build_trace("watermark", 0.0, acks, log, anomalies)
    assert [(write.id, round(write.open_ms)) for write in trace.writes] == [("b", 80), ("a", 5), ("c", 10)]
    assert [delivery.id for delivery in trace.deliveries] == ["a", "c"]
    late = trace.write_of("b", T0 + 0.1)
    assert late is not None and late.stamp == T0 + 0.100  # the stamp the detector read


def test_a_version_no_reader_saw_is_placed_at_its_date_modified() -> None:
    log = CrawlerLog()
    trace = build_trace("watermark", 0.0, [("x", "2026-12-06T04:50:10.250000+00:00", T0)], log)
    assert trace.writes[0].stamp == pytest.approx(1796532610.25)


@pytest.mark.parametrize("suffix, magic", [(".svg", b"<?xml"), (".png", b"\x89PNG")])
def test_the_recorded_race_is_drawn(tmp_path: Path, suffix: str, magic: bytes) -> None:
    acks, log, anomalies = recorded_run()
    anomaly_run = build_trace("watermark", 0.0, acks, log, anomalies)
    safe_run = build_trace("watermark", 1.0, acks, log)
    path = str(tmp_path / f"race{suffix}")
    lines = plot_race([safe_run, anomaly_run], path)
    assert Path(path).read_bytes().startswith(magic)
    # the anomaly first, its numbers: open 80 ms, the detector 20 ms ahead
    assert lines[0].startswith("W = 0 s: a write open 80 ms")
    assert "20 ms behind the newest item" in lines[0]
    assert lines[1].startswith("W = 1 s:")
    if suffix == ".svg":
        root = ElementTree.parse(path).getroot()  # nosec B314 - a file this test wrote
        assert root.tag == SVG


def test_every_panel_is_as_long_as_the_anomalys() -> None:
    acks, log, anomalies = recorded_run()
    chosen = panels([build_trace("commit", 0.0, acks, log), build_trace("watermark", 0.0, acks, log, anomalies)])
    assert [panel.trace.order for panel in chosen] == ["watermark", "commit"]
    lengths = {round(panel.end - panel.start, 6) for panel in chosen}
    assert len(lengths) == 1


def test_a_picture_file_needs_svg_or_png() -> None:
    assert image_format("docs/_static/race.SVG") == "svg"
    with pytest.raises(ValueError, match=r"must end in \.svg or \.png"):
        image_format("race.pdf")


def test_race_plot_refuses_another_extension(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli_main(["race", "--plot", "race.jpg"])
    assert exit_info.value.code == 2
    assert "--plot: 'race.jpg': the picture's file name must end in .svg or .png" in capsys.readouterr().err


def test_without_matplotlib_the_extra_is_named(tmp_path: Path) -> None:
    # The child process cannot import matplotlib, as without the extra.
    code = (
        "import sys; sys.modules['matplotlib'] = None\n"
        "from openprocurement_feed.cli import main\n"
        f"sys.exit(main(['race', '--duration', '1', '--plot', {str(tmp_path / 'race.svg')!r}]))\n"
    )
    child = subprocess.run(  # nosec B603 - our own interpreter and code
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=dict(os.environ)
    )
    assert child.returncode == 2, child.stderr
    assert "pip install 'openprocurement_feed[plot]'" in child.stderr
    assert "Traceback" not in child.stderr
    assert not (tmp_path / "race.svg").exists()


def test_the_extra_missing_message() -> None:
    assert "the 'plot' extra (matplotlib)" in str(PlotExtraMissing())


@pytest.mark.slow
def test_race_plot_draws_a_real_run(mongodb_uri: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "race.svg"
    argv = ["race", "--duration", "2", "--small", "20", "--large", "0", "--writers", "4", "--rate", "0"]
    argv += ["--watermark", "0", "--no-commit", "--longpoll", "0", "--settle", "0.5"]
    argv += ["--mongodb-uri", mongodb_uri, "--plot", str(path)]
    assert cli_main(argv) == 0
    err = capsys.readouterr().err
    assert f"Race timeline written to {path}:" in err
    assert "  W = 0 s: a write open " in err
    root = ElementTree.parse(path).getroot()  # nosec B314 - a file the command wrote
    assert root.tag == SVG
    assert len(root.findall(".//{http://www.w3.org/2000/svg}path")) > 10  # bars and reads drawn
