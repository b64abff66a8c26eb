"""``openprocurement-feed sync`` against the demo API over real HTTP."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from openprocurement_feed.cli import main
from openprocurement_feed.demo.load import create_tenders
from openprocurement_feed.demo.server import DemoServer

pytestmark = [pytest.mark.timeout(60), pytest.mark.server]

W = 0.2


@pytest.fixture
def demo(mongodb_uri: str, db_name: str) -> Iterator[DemoServer]:
    server = DemoServer(
        {
            "mongodb.uri": mongodb_uri,
            "mongodb.db_name": db_name,
            "feed.watermark_seconds": str(W),
        }
    ).start()
    yield server
    server.close()


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_sync_writes_items_resumes_and_reports(
    demo: DemoServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ids = create_tenders(demo.api_url, 45, seed=11)
    time.sleep(W + 0.15)
    url = demo.api_url + "/tenders"
    state, out = tmp_path / "state.json", tmp_path / "items.jsonl"
    argv = [
        "sync",
        url,
        "--state",
        str(state),
        "--out",
        str(out),
        "--limit",
        "10",
        "--opt-fields",
        "status,tenderID,bogus",
    ]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "Synced 45 items" in err and "Backward crawl: done" in err and "caught up" in err
    items = lines(out)
    assert sorted(item["id"] for item in items) == sorted(ids)
    assert all(set(item) == {"id", "dateModified", "status", "tenderID"} for item in items)
    saved = json.loads(state.read_text())
    assert saved["backward_done"] and saved["feed"]["opt_fields"] == ["bogus", "status", "tenderID"]

    requests.patch(f"{url}/{ids[0]}", json={"data": {"title": "new"}}).raise_for_status()
    time.sleep(W + 0.15)
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "Resuming from" in err and "Synced 1 items" in err
    items = lines(out)
    assert len(items) == 46 and items[-1]["id"] == ids[0]


def test_sync_refuses_bad_input_with_one_line(
    demo: DemoServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = demo.api_url + "/tenders"
    state = tmp_path / "state.json"
    assert main(["sync", url, "--state", str(state), "--no-progress"]) == 0
    capsys.readouterr()

    assert main(["sync", url, "--state", str(state), "--mode", "test"]) == 2
    err = capsys.readouterr().err
    assert "belongs to another feed" in err and "Traceback" not in err

    state.write_text("{broken")
    assert main(["sync", url, "--state", str(state)]) == 2
    assert "not valid JSON" in capsys.readouterr().err

    assert main(["sync", url, "--state", str(tmp_path / "nowhere" / "s.json")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["sync", url, "--state", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err

    for argv, message in (
        (["sync", "not-a-url", "--state", "s"], "expected an http"),
        (["sync", url, "--state", "s", "--limit", "0"], "--limit"),
        (["sync", url, "--state", "s", "--mode", "real"], "--mode"),
        (["sync", url, "--state", "s", "--opt-fields", "a b"], "--opt-fields"),
        (["sync", url, "--state", "s", "--poll", "-1"], "--poll"),
        (["sync", url], "--state"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == 2
        assert message in capsys.readouterr().err

    # a server that is not a feed: a clear message, exit status 1
    assert main(["sync", demo.url + "/nothing-here", "--state", str(tmp_path / "n.json"), "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "HTTP 404" in err and "Traceback" not in err


def test_follow_shows_progress_and_stops_cleanly_on_ctrl_c(demo: DemoServer, tmp_path: Path) -> None:
    ids = create_tenders(demo.api_url, 30, seed=12)
    time.sleep(W + 0.15)
    state, out = tmp_path / "state.json", tmp_path / "items.jsonl"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "openprocurement_feed.cli",
            "sync",
            demo.api_url + "/tenders",
            "--state",
            str(state),
            "--out",
            str(out),
            "--follow",
            "--poll",
            "0.1",
            "--limit",
            "7",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "COLUMNS": "150"},
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if out.exists() and len(out.read_text().splitlines()) >= 30:
                break
            time.sleep(0.1)
        new = create_tenders(demo.api_url, 3, seed=13)
        while time.monotonic() < deadline and len(out.read_text().splitlines()) < 33:
            time.sleep(0.1)
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=20)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 130
    assert "Traceback" not in err
    assert "items" in err and "backward=done" in err  # the progress display
    assert "Stopping after the current page" in err and "Synced 33 items" in err
    assert sorted(item["id"] for item in lines(out)) == sorted(ids + new)
    saved = json.loads(state.read_text())
    assert saved["backward_done"] and saved["items_handled"] == 33


def test_the_progress_postfix_names_retries_restarts_and_waits() -> None:
    """The sync progress line shows what the crawler is doing beside the count."""
    from types import SimpleNamespace

    from openprocurement_feed.commands.sync import Progress

    progress = Progress(enabled=False)
    stats = SimpleNamespace(
        items=7, pages=3, backward_done=True, duplicates=1, retries=2, restarts=1, caught_up_at=12.0
    )
    progress.retry(stats, SimpleNamespace(wait=1.5, reason="HTTP 503"))
    postfix = progress.bar.postfix
    for part in (
        "pages=3",
        "backward=done",
        "dups=1",
        "retries=2",
        "restarts=1",
        "caught up",
        "waiting 1.5s (HTTP 503)",
    ):
        assert part in postfix
    progress.update(stats)
    assert progress.shown == 7 and "waiting" not in progress.bar.postfix
