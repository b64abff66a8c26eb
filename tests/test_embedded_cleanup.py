"""The embedded server's throwaway folder goes away when the process that
started it ends, SIGTERM included (``pserve`` under systemd or docker)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

#: starts servers or processes of its own (make test-unit leaves it out)
pytestmark = pytest.mark.server

APP = textwrap.dedent("""
    import sys, time
    from openprocurement_feed.demo import main
    app = main({}, **{"mongodb.uri": "embedded://", "mongodb.db_name": "cleanup"})
    server = app.registry.feed_embedded
    print(server._tmpdir, server.port, flush=True)
    time.sleep(120)
""")


def start_app() -> tuple[subprocess.Popen[str], Path]:
    process = subprocess.Popen([sys.executable, "-c", APP], stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    line = process.stdout.readline().split()
    assert line, "the app did not start"
    folder = Path(line[0])
    assert folder.is_dir() and any(folder.iterdir())
    return process, folder


def wait_gone(folder: Path, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while folder.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    return not folder.exists()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_the_throwaway_folder_is_removed_on_a_signal(signum: int) -> None:
    process, folder = start_app()
    try:
        process.send_signal(signum)
        process.wait(30)
        assert wait_gone(folder), f"{folder} left behind after signal {signum}"
    finally:
        if process.poll() is None:
            process.kill()


def test_the_folder_is_removed_even_when_the_app_is_killed() -> None:
    process, folder = start_app()
    os.kill(process.pid, signal.SIGKILL)
    process.wait(30)
    assert wait_gone(folder), f"{folder} left behind after SIGKILL"
