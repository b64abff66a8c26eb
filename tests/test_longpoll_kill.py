"""Nothing is lost across ``kill -9`` with long-poll feeds (SPEC E.6, issue 18).

* A long-polling ``openprocurement-feed sync --follow`` process is killed
  with SIGKILL while writes go on, restarted from its saved state, and ends
  holding every tender's final version, in both orders.
* The sequencer process (``openprocurement-feed sequence CONFIG.ini``) of a
  commit-ordered feed, served by the demo on a real loopback server with
  ``feed.sequencer = off``, is killed with SIGKILL and restarted while a
  long-polling crawler waits at the head: the crawler ends holding every
  final version.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from conftest import wait_sequenced

from openprocurement_feed.client import FeedSync
from openprocurement_feed.demo.load import create_tenders
from openprocurement_feed.demo.server import DemoServer
from tests.test_sequencer import start_sequence, wait_for_state, write_ini

pytestmark = [pytest.mark.timeout(90), pytest.mark.server]

Version = tuple[str, str]


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
        time.sleep(0.05)


class Writer(threading.Thread):
    """Patches the given tenders over HTTP, one every ``pause`` seconds, until stopped."""

    def __init__(self, api: str, ids: list[str], pause: float = 0.01) -> None:
        super().__init__(name="writer", daemon=True)
        self.api = api
        self.ids = ids
        self.pause = pause
        self.patches = 0
        self.errors: list[str] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        rng = random.Random(7)
        with requests.Session() as session:
            while not self.stopping.is_set():
                tender_id = rng.choice(self.ids)
                response = session.patch(
                    f"{self.api}/tenders/{tender_id}", json={"data": {"title": f"t{self.patches}"}}, timeout=30
                )
                if response.status_code == 200:
                    self.patches += 1
                elif response.status_code != 409:  # a write conflict is retried by the next patch
                    self.errors.append(f"{response.status_code} {response.text[:200]}")
                self.stopping.wait(self.pause)

    def stop(self) -> None:
        self.stopping.set()
        self.join(30)
        assert not self.is_alive()
        assert not self.errors, self.errors[:3]


def finals(server: DemoServer) -> set[Version]:
    """Every public tender's final version, from the database."""
    collection = server.registry.feed_store.collection("tenders")
    return {(doc["_id"], doc["dateModified"]) for doc in collection.find({"is_public": True}, {"dateModified": 1})}


def longpoll_wakeups(server: DemoServer) -> int:
    """Long-poll waiters the server woke so far (all feeds)."""
    return sum(counters["wakeups"] for counters in server.registry.feed_longpoll.report().values())


# -- a long-polling crawler process killed with SIGKILL ------------------------


@pytest.fixture(params=["watermark", "commit"])
def demo(request: pytest.FixtureRequest, settings: dict[str, str]) -> Iterator[DemoServer]:
    options = dict(settings)
    if request.param == "commit":
        options.update({"feed.order": "commit", "feed.sequencer": "thread"})
    server = DemoServer(options, threads=8).start()
    if request.param == "commit":
        assert server.registry.feed_sequencer.wait_ready(timeout=30)
    yield server
    server.close()


def start_sync(url: str, state: Path, out: Path) -> subprocess.Popen[str]:
    """``sync --follow`` long-polling (a 5 s poll interval: polling would
    show as a slow crawler, not hide a lost change)."""
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "openprocurement_feed.cli",
            "sync",
            url,
            "--state",
            str(state),
            "--out",
            str(out),
            "--follow",
            "--longpoll",
            "10",
            "--poll",
            "5",
            "--limit",
            "10",
            "--no-progress",
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def written(out: Path) -> tuple[set[Version], int]:
    """The versions in the JSON-lines file and the number of torn lines
    (a write cut short by SIGKILL)."""
    versions, torn = set(), 0
    if not out.exists():
        return set(), 0
    for line in out.read_text(encoding="utf-8").splitlines():
        try:
            item = json.loads(line)
        except ValueError:
            torn += 1
            continue
        versions.add((item["id"], item["dateModified"]))
    return versions, torn


def test_a_longpolling_sync_killed_with_sigkill_resumes_and_loses_nothing(demo: DemoServer, tmp_path: Path) -> None:
    ids = create_tenders(demo.api_url, 20, seed=21)
    url, state, out = demo.api_url + "/tenders", tmp_path / "state.json", tmp_path / "items.jsonl"
    writer = Writer(demo.api_url, ids)
    first = start_sync(url, state, out)
    second: subprocess.Popen[str] | None = None
    try:
        wait_for(lambda: {key for key, _ in written(out)[0]} >= set(ids), 30, "the first crawler read the tenders")
        woken = longpoll_wakeups(demo)
        writer.start()
        # it follows the writes by long-polling: the server wakes its requests
        wait_for(lambda: longpoll_wakeups(demo) > woken, 20, "the crawler was woken from a long-poll")
        before = writer.patches
        wait_for(lambda: writer.patches >= before + 5, 20, "more writes while the crawler follows")
        first.send_signal(signal.SIGKILL)  # mid-run: writes go on
        first.communicate(timeout=10)
        at_kill = writer.patches
        wait_for(lambda: writer.patches >= at_kill + 10, 20, "writes while the crawler is dead")
        second = start_sync(url, state, out)
        restarted = writer.patches
        wait_for(lambda: writer.patches >= restarted + 10, 20, "writes after the restart")
        writer.stop()
        assert writer.patches > at_kill, "writes went on while the crawler was dead"
        expected = finals(demo)
        wait_for(lambda: expected <= written(out)[0], 30, "the restarted crawler holds every final version")
        second.send_signal(signal.SIGTERM)
        _, err = second.communicate(timeout=20)
    finally:
        writer.stopping.set()
        for process in (first, second):
            if process is not None and process.poll() is None:
                process.kill()
                process.communicate()
    assert first.returncode == -signal.SIGKILL
    assert second.returncode == 0, err
    assert "Resuming from" in err and "Traceback" not in err
    saved = json.loads(state.read_text())
    assert saved["backward_done"]
    assert written(out)[1] <= 1, "at most the line the kill cut short is torn"


# -- the sequencer process killed with SIGKILL -----------------------------------


def test_sequencer_killed_with_sigkill_while_a_crawler_longpolls_loses_nothing(
    mongodb_uri: str, db_name: str, tmp_path: Path
) -> None:
    server = DemoServer(
        {
            "mongodb.uri": mongodb_uri,
            "mongodb.db_name": db_name,
            "feed.order": "commit",
            "feed.sequencer": "off",
        },
        threads=8,
    ).start()
    ini = write_ini(tmp_path / "app.ini", mongodb_uri, db_name)
    store = server.registry.feed_store
    first = start_sequence(ini)
    second: subprocess.Popen[str] | None = None
    seen: set[Version] = set()
    lock = threading.Lock()

    def handle(batch: Any) -> None:
        with lock:
            seen.update((item["id"], item["dateModified"]) for item in batch.items)

    def holds(versions: set[Version]) -> bool:
        with lock:
            return versions <= seen

    client = FeedSync(
        f"{server.api_url}/tenders",
        handle,
        poll_interval=5.0,  # would show as a slow crawler if it polled
        longpoll=10.0,
    )
    runner = threading.Thread(target=client.run, kwargs={"follow": True}, name="crawler", daemon=True)
    writer: Writer | None = None
    try:
        wait_for_state(store, "checkpoint", timeout=30)
        ids = create_tenders(server.api_url, 20, seed=22)
        wait_sequenced(store.db, timeout=30)
        runner.start()
        created = {
            (doc["_id"], doc["dateModified"]) for doc in store.collection("tenders").find({}, {"dateModified": 1})
        }
        wait_for(lambda: holds(created), 30, "the crawler read the tenders")
        wait_for(lambda: server.registry.feed_longpoll.waiting >= 1, 20, "the crawler waits at the head")
        writer = Writer(server.api_url, ids)
        writer.start()
        wait_for(lambda: writer.patches >= 20, 20, "the writes began")
        wait_for(lambda: writer.patches >= 30, 20, "the writes went on")
        first.send_signal(signal.SIGKILL)  # mid-stream, the crawler waiting at the head
        first.communicate(timeout=10)
        at_kill = writer.patches
        wait_for(lambda: writer.patches >= at_kill + 10, 20, "writes while the sequencer is dead")
        # no checkpoint moves while the sequencer is dead: the crawler waits
        wait_for(lambda: server.registry.feed_longpoll.waiting >= 1, 20, "the crawler waits during the outage")
        assert writer.patches > at_kill, "writes went on while the sequencer was dead"
        second = start_sequence(ini)
        restarted = writer.patches
        wait_for(lambda: writer.patches >= restarted + 10, 20, "writes after the restart")
        writer.stop()
        expected = finals(server)
        wait_for(lambda: holds(expected), 30, "the crawler holds every final version")
    finally:
        if writer is not None:
            writer.stopping.set()
        client.stop()
        server.registry.feed_longpoll.stop()  # answer the crawler's waiting request
        runner.join(10)
        client.close()
        for process in (first, second):
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.communicate(timeout=20)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.communicate()
        server.close()
    assert not runner.is_alive()
    assert first.returncode == -signal.SIGKILL
    assert second is not None and second.returncode == 0
    assert client.stats.polls < 10, f"{client.stats.polls} empty answers: the crawler polled"
