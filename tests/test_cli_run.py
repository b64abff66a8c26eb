"""``openprocurement-feed run`` as a user runs it: a real process on a real
port, data in the feed, and a clean stop on Ctrl-C with no database left."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from openprocurement_feed.cli import main as cli_main
from openprocurement_feed.embedded.server import free_port

#: starts servers or processes of its own (make test-unit leaves it out)
pytestmark = pytest.mark.server

SCRIPT = Path(sys.executable).with_name("openprocurement-feed")


def children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split()[2] != "Z"


@pytest.mark.parametrize("stop_signal", [signal.SIGINT, signal.SIGTERM])
def test_run_serves_a_live_feed_and_stops_cleanly(stop_signal: int, tmp_path: Path) -> None:
    port = free_port()
    err_path = tmp_path / "stderr.txt"
    err_file = err_path.open("w")
    process = subprocess.Popen(
        [
            str(SCRIPT),
            "run",
            "--port",
            str(port),
            "--tenders",
            "5",
            "--plans",
            "3",
            "--contracts",
            "2",
            "--rate",
            "4",
            "--watermark",
            "0.3",
            "--status-every",
            "1",
        ],
        stdout=subprocess.PIPE,
        stderr=err_file,
        text=True,
    )
    url = f"http://127.0.0.1:{port}/api/2.5/tenders"
    try:
        body = None
        # start-up, seeding and the watermark: seconds on a quiet machine,
        # far more on a busy one
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(url, timeout=2) as response:
                    body = json.load(response)
                if body["data"]:
                    break
            except OSError:
                pass
            time.sleep(0.2)
        assert body is not None and body["data"], "the feed served data within 60 s"
        for resource, count in (("plans", 3), ("contracts", 2)):
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                with urllib.request.urlopen(url.replace("tenders", resource), timeout=2) as response:
                    if len(json.load(response)["data"]) == count:
                        break
                time.sleep(0.2)
            else:
                raise AssertionError(f"the {resource} feed did not show the {count} seeded objects")
        request = urllib.request.Request(url, data=b'{"data": {}}', headers={"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=5)
        assert refused.value.code == 401, "the demo brokers' auth file is on: anonymous writes are refused"
        deadline = time.monotonic() + 30
        while "] tenders: " not in err_path.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)  # polling for the first status lines, with a deadline
        assert "] tenders: " in err_path.read_text(), "a status within 30 s"
        database = children(process.pid)
        assert database, "the embedded database runs as a child process"
    finally:
        process.send_signal(stop_signal)
        out, _ = process.communicate(timeout=30)
        err_file.close()
    err = err_path.read_text()
    assert process.returncode == 0, err
    assert url in out
    assert url + "-watermark" in out, "the same tenders in the other order are served too"
    for resource in ("plans", "contracts"):
        assert url.replace("tenders", resource) + "?descending=1" in out
    assert "asked 4/s, achieved" in err, err
    # stderr is a pipe: each interval, one plain line per feed
    status = re.findall(r"^\[ *(\d+) s\] ([\w-]+): (\w[\w-]*); lag p50 ", err, re.MULTILINE)
    feeds = {name for _, name, _ in status}
    assert {"tenders", "tenders_watermark", "plans", "contracts"} <= feeds, err
    assert len(status) % len(feeds) == 0, err
    for start in range(0, len(status), len(feeds)):
        block = status[start : start + len(feeds)]
        assert {name for _, name, _ in block} == feeds, err
        assert len({elapsed for elapsed, _, _ in block}) == 1, err
    assert "Authorization: Bearer demo-broker-key" in out, "a broker's key is printed"
    written = [int(count) for count in re.findall(r"(\d+) patches written", err)]
    assert written and written[-1] > 0, f"the writers patched with the key and the tokens: {err}"
    assert "pkg_resources" not in err
    assert "Traceback" not in err
    # the database may take a moment to end after its parent: waited for, with a deadline
    deadline = time.monotonic() + 30
    while [pid for pid in database if alive(pid)] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [pid for pid in database if alive(pid)], "no orphaned database process"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["run", "--port", "0"], "--port: expected a port number 1-65535, got '0'"),
        (["run", "--watermark", "-1"], "--watermark: expected a number >= 0, got '-1'"),
        (["run", "--rate", "fast"], "--rate: expected a number >= 0, got 'fast'"),
        (["run", "--tenders", "0"], "--tenders: expected an integer >= 1, got '0'"),
    ],
)
def test_bad_flags_name_the_flag(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli_main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_bad_write_delay_names_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli_main(["run", "--write-delay", "40-5"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "--write-delay" in err and "from low to high" in err and "Traceback" not in err


def test_missing_embedded_server_says_which_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from openprocurement_feed.embedded import server as embedded

    monkeypatch.setattr(embedded, "EXECUTABLE", "no-such-secantusd")
    with pytest.raises(embedded.EmbeddedServerError, match=r"openprocurement_feed\[embedded\]"):
        embedded.EmbeddedServer().start()


@pytest.mark.parametrize("argv", [["--help"], ["check", "--help"], ["run", "--help"]])
def test_cli_output_has_no_dependency_warning(argv: list[str]) -> None:
    result = subprocess.run([str(SCRIPT), *argv], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0
    assert "usage: openprocurement-feed" in result.stdout
    assert result.stderr == ""


def test_the_filter_does_not_hide_the_users_warnings() -> None:
    """The same message raised by other code (here ``__main__``) still shows
    in the command's process; a plain import of the package is left alone."""
    code = (
        "import sys, warnings; sys.argv = ['openprocurement-feed']; import openprocurement_feed; "
        "warnings.warn('pkg_resources is deprecated as an API (mine)', UserWarning)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "(mine)" in result.stderr
    assert "pyramid" not in result.stderr
    plain = subprocess.run(
        [sys.executable, "-W", "default", "-c", "import openprocurement_feed"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "pkg_resources is deprecated" in plain.stderr, "a host application still sees it"


def test_writers_for_rate_covers_the_write_delay() -> None:
    from openprocurement_feed.demo.load import PATCH_OVERHEAD_SECONDS, writers_for_rate

    assert writers_for_rate(0, (5, 40)) == 0
    assert writers_for_rate(5, (0, 0)) == 1
    for rate, delay in ((60, (5, 40)), (160, (0, 0)), (72, (5, 40)), (30, (100, 300))):
        count = writers_for_rate(rate, delay)
        per_writer = 1 / ((delay[0] + delay[1]) / 2000 + PATCH_OVERHEAD_SECONDS)
        assert count * per_writer >= 1.5 * rate, (rate, delay, count)
    assert writers_for_rate(100_000, (5, 40)) == 64


def test_the_runs_rate_says_asked_and_achieved() -> None:
    from types import SimpleNamespace

    from openprocurement_feed.commands.run import RateMeter

    writers = [SimpleNamespace(stats=SimpleNamespace(patches=200)) for _ in range(3)]
    meter = RateMeter(60.0)
    line = meter.overall(writers, 10.0)  # 600 patches in 10 s: 60/s
    assert "600 patches written by 3 writers in 10 s; asked 60/s, achieved 60.0/s" in line
    assert "below" not in line
    line = meter.overall(writers, 60.0)  # 10/s
    assert "asked 60/s, achieved 10.0/s" in line and "below the rate asked" in line
