"""``openprocurement-feed run`` as a user runs it: a real process on a real
port, data in the feed, and a clean stop on Ctrl-C with no database left."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from openprocurement_feed.cli import main as cli_main
from openprocurement_feed.embedded import free_port

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
def test_run_serves_a_live_feed_and_stops_cleanly(stop_signal: int) -> None:
    port = free_port()
    process = subprocess.Popen(
        [str(SCRIPT), "run", "--port", str(port), "--tenders", "5", "--rate", "4", "--watermark", "0.3"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    url = f"http://127.0.0.1:{port}/api/2.5/tenders"
    try:
        body = None
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(url, timeout=2) as response:
                    body = json.load(response)
                if body["data"]:
                    break
            except OSError:
                pass
            time.sleep(0.2)
        assert body is not None and body["data"], "the feed served data within 10 s"
        database = children(process.pid)
        assert database, "the embedded database runs as a child process"
    finally:
        process.send_signal(stop_signal)
        out, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    assert url in out
    assert url + "-watermark" in out, "the same tenders in the other order are served too"
    assert "Traceback" not in err
    time.sleep(0.5)
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
    from openprocurement_feed import embedded

    monkeypatch.setattr(embedded, "EXECUTABLE", "no-such-secantusd")
    with pytest.raises(embedded.EmbeddedServerError, match=r"openprocurement_feed\[embedded\]"):
        embedded.EmbeddedServer().start()
