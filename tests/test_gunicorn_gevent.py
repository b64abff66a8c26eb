"""The demo under ``gunicorn -k gevent`` (SPEC E.4): 200 long-poll waiters
in one worker, ordinary requests answered meanwhile, one change answering
every waiter, and a quick stop.

gunicorn's gevent worker calls ``gevent.monkey.patch_all()`` before it
loads the app: the notifier's thread and events and pymongo's sockets are
gevent's there, which is what this test exercises. The waiters are real
threads of the test process (``requests``), outside gunicorn.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from openprocurement_feed.embedded.server import free_port

#: starts servers or processes of its own (make test-unit leaves it out)
pytestmark = pytest.mark.server

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
PREFIX = "/api/2.5"
WAITERS = 200


class Waiter(threading.Thread):
    """One ``feed=longpoll`` GET: its answer and when it came."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.response: requests.Response | None = None
        self.error: BaseException | None = None
        self.answered_at = 0.0

    def run(self) -> None:
        try:
            self.response = requests.get(self.url, timeout=30)
        except BaseException as error:  # reported by the test
            self.error = error
        self.answered_at = time.monotonic()


def rss_kb(pid: int) -> int:
    """The resident memory of process ``pid`` in KB (``VmRSS``)."""
    with open(f"/proc/{pid}/status", encoding="ascii") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError(f"no VmRSS for process {pid}")


#: a broker of the demo's auth file (openprocurement_feed/demo/auth.ini)
BROKER_KEY = "demo-broker-key"


def worker_pid(master: int) -> int:
    """The one worker of gunicorn's master ``master``."""
    with open(f"/proc/{master}/task/{master}/children", encoding="ascii") as handle:
        (pid,) = [int(child) for child in handle.read().split()]
    return pid


def waiting(base: str) -> int:
    """The tenders feed's waiters now, from the health view."""
    health = requests.get(f"{base}{PREFIX}/feeds/health", timeout=10).json()
    (feed,) = [item for item in health["feeds"] if item["name"] == "tenders"]
    return int(feed["longpoll"]["waiting"])


def wait_waiting(base: str, count: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while (now := waiting(base)) < count:
        assert time.monotonic() < deadline, f"{now} waiters after {timeout} s, not {count}"
        time.sleep(0.1)


def head(base: str) -> str:
    offset = ""
    while True:
        page = requests.get(f"{base}{PREFIX}/tenders?limit=1000&offset={offset}", timeout=10).json()
        if not page["data"]:
            return offset
        offset = page["next_page"]["offset"]


@pytest.fixture
def gunicorn(mongodb_uri: str, db_name: str, tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """The demo (examples/demo.ini) under gunicorn's gevent worker, with the
    stop hook of examples/gunicorn_gevent.conf.py."""
    port = free_port()
    env = dict(
        os.environ,
        MONGODB_URI=mongodb_uri,
        DB_NAME=db_name,
        FEED_WATERMARK_SECONDS="0.2",
        FEED_LONGPOLL_MAX_WAITERS="250",
        PYTHONPATH=os.pathsep.join([str(EXAMPLES.parent), os.environ.get("PYTHONPATH", "")]),
    )
    log = open(tmp_path / "gunicorn.log", "wb")  # noqa: SIM115 - closed below
    # the ini's paths are relative to its folder, as under pserve
    command = [sys.executable, "-m", "gunicorn", "-c", str(EXAMPLES / "gunicorn_gevent.conf.py")]
    command += ["-k", "gevent", "--worker-connections", "400", "-w", "1", "-b", f"127.0.0.1:{port}"]
    command += ["--paste", str(EXAMPLES / "demo.ini")]
    process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=EXAMPLES)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            assert process.poll() is None, (tmp_path / "gunicorn.log").read_text()
            try:
                if requests.get(f"{base}{PREFIX}/tenders", timeout=5).status_code == 200:
                    break
            except (requests.ConnectionError, requests.Timeout):
                pass  # not listening yet, or its first request (index creation) still runs
            assert time.monotonic() < deadline, "gunicorn did not answer in 30 s"
            time.sleep(0.2)
        yield process, base
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
        log.close()
        text = (tmp_path / "gunicorn.log").read_text(errors="replace")
        assert "Traceback" not in text, text


def timed(send: Any) -> tuple[requests.Response, float]:
    started = time.monotonic()
    response = send()
    return response, time.monotonic() - started


def test_200_waiters_under_gunicorn_gevent(gunicorn: tuple[subprocess.Popen[bytes], str]) -> None:
    process, base = gunicorn
    api = base + PREFIX
    # the ini's demo brokers (demo.auth_file): writes carry a broker's key
    # and, for a change, the object's token
    key = {"Authorization": f"Bearer {BROKER_KEY}"}
    created_tender = requests.post(f"{api}/tenders", json={"data": {"title": "t"}}, headers=key, timeout=10).json()
    tender, tender_token = created_tender["data"], created_tender["access"]["token"]
    time.sleep(0.5)  # past the watermark
    offset = head(base)
    worker = worker_pid(process.pid)
    for _ in range(20):  # warm up: the worker's code and pools loaded
        requests.get(f"{api}/tenders?offset={offset}", timeout=10)
    rss_before = rss_kb(worker)

    url = f"{api}/tenders?feed=longpoll&timeout=30&offset={offset}"
    waiters = [Waiter(url) for _ in range(WAITERS)]
    for waiter in waiters:
        waiter.start()
    wait_waiting(base, WAITERS)
    rss_during = rss_kb(worker)
    print(
        f"\ngunicorn gevent worker RSS: {rss_before} KB idle, {rss_during} KB with {WAITERS} waiters "
        f"({(rss_during - rss_before) / WAITERS:.1f} KB per waiter)"
    )

    # ordinary requests meanwhile: drafts do not show in the feed, so they
    # do not wake the waiters
    draft = {"data": {"title": "d", "status": "draft"}}
    created, post_seconds = timed(lambda: requests.post(f"{api}/tenders", json=draft, headers=key, timeout=10))
    assert created.status_code == 201, created.text
    draft_id, draft_token = created.json()["data"]["id"], created.json()["access"]["token"]
    ordinary = {
        "POST a draft tender": post_seconds,
        "PATCH the draft": timed(
            lambda: requests.patch(
                f"{api}/tenders/{draft_id}?acc_token={draft_token}",
                json={"data": {"title": "d2"}},
                headers=key,
                timeout=10,
            )
        )[1],
        "GET a tender": timed(lambda: requests.get(f"{api}/tenders/{tender['id']}", timeout=10))[1],
        "GET a feed page": timed(lambda: requests.get(f"{api}/tenders?offset={offset}", timeout=10))[1],
        "GET the plans feed": timed(lambda: requests.get(f"{api}/plans", timeout=10))[1],
    }
    # Without gevent they would wait for a waiter's timeout (30 s): their own
    # timeout (10 s) would fail them first. Answered, the waiters all still
    # waiting and none answered: they did not wait for one. The times are
    # printed, not compared (a loaded machine takes what it takes).
    print("beside the waiters: " + ", ".join(f"{name} {seconds:.3f} s" for name, seconds in ordinary.items()))
    assert waiting(base) == WAITERS, "the ordinary requests released waiters"
    assert not any(waiter.response or waiter.error for waiter in waiters)

    # one change answers every waiter with it
    patched = requests.patch(
        f"{api}/tenders/{tender['id']}?acc_token={tender_token}",
        json={"data": {"title": "t2"}},
        headers=key,
        timeout=10,
    )
    assert patched.status_code == 200, patched.text
    changed_at = time.monotonic()
    for waiter in waiters:
        waiter.join(40)
    errors = [waiter.error for waiter in waiters if waiter.error is not None]
    assert not errors, f"{len(errors)} waiters failed: {errors[0]!r}"
    answers = [waiter.response for waiter in waiters]
    expected = [(tender["id"], patched.json()["data"]["dateModified"])]
    for answer in answers:
        assert answer is not None and answer.status_code == 200, answer
        assert [(item["id"], item["dateModified"]) for item in answer.json()["data"]] == expected
    slowest_answer = max(waiter.answered_at for waiter in waiters) - changed_at
    # answered by the change (each answer holds it), not by the timeout (30 s: an empty page)
    print(f"the last waiter was answered {slowest_answer:.2f} s after the change")

    # a stop with waiters: SIGTERM answers them at once, gunicorn exits
    offset = answers[0].json()["next_page"]["offset"]  # type: ignore[union-attr]
    url = f"{api}/tenders?feed=longpoll&timeout=30&offset={offset}"
    waiters = [Waiter(url) for _ in range(WAITERS)]
    for waiter in waiters:
        waiter.start()
    wait_waiting(base, WAITERS)
    stopped_at = time.monotonic()
    process.send_signal(signal.SIGTERM)
    process.wait(25)  # bounds a hang, below the waiters' 30 s: a stop that waited for them fails here
    stop_seconds = time.monotonic() - stopped_at
    for waiter in waiters:
        waiter.join(5)
    print(f"gunicorn stopped {stop_seconds:.2f} s after SIGTERM with {WAITERS} waiters")
    assert process.returncode == 0
    unanswered = [waiter for waiter in waiters if waiter.response is None or waiter.response.status_code != 200]
    assert not unanswered, f"{len(unanswered)} waiters were not answered on the stop"
    assert all(waiter.response.json()["data"] == [] for waiter in waiters)  # type: ignore[union-attr]
