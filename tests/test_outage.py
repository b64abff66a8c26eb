"""A database outage under load: the demo API on a real HTTP server while its
database is stopped and started again.

While the database is down every request answers 503 with the JSON error body
and ``Retry-After``, within about the configured server-selection timeout (no
hang, no 500, no traceback); when it is back everything recovers by itself;
and every write that was acknowledged (201/200) is in the database afterwards.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import requests
from pymongo import MongoClient

from openprocurement_feed.demo.load import WORDS, create_tenders, sample_tender
from openprocurement_feed.demo.server import DemoServer
from openprocurement_feed.embedded.server import EmbeddedServer, free_port

#: starts servers or processes of its own (make test-unit leaves it out)
pytestmark = pytest.mark.server

SELECTION_TIMEOUT_MS = 1500
#: A request slower than this during the outage counts as a hang. Generous:
#: a read is retried once (two server selections), a write may be in flight.
HANG_SECONDS = 4 * SELECTION_TIMEOUT_MS / 1000 + 4
DB_NAME = "outage"
KINDS = {"create", "patch", "read"}


@dataclass
class Outcome:
    """One HTTP request: what was asked, what came back, how long it took."""

    kind: str
    status: int
    seconds: float
    started: float
    json_error: bool = False
    retry_after: str | None = None


@dataclass
class Ledger:
    """Everything the workers saw, and the writes the API acknowledged."""

    outcomes: list[Outcome] = field(default_factory=list)
    created: set[str] = field(default_factory=set)
    patched: dict[str, str] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, outcome: Outcome) -> None:
        with self.lock:
            self.outcomes.append(outcome)

    def kinds(self, since: float, statuses: set[int]) -> set[str]:
        """The kinds of request begun after ``since`` answered with one of ``statuses``."""
        with self.lock:
            return {o.kind for o in self.outcomes if o.started > since and o.status in statuses}


class Worker(threading.Thread):
    """Sends one kind of request in a loop until stopped."""

    def __init__(self, kind: str, api_url: str, ids: list[str], ledger: Ledger, seed: int) -> None:
        super().__init__(name=f"outage-{kind}-{seed}", daemon=True)
        import random

        self.kind = kind
        self.api_url = api_url
        self.ids = ids
        self.ledger = ledger
        self.rng = random.Random(seed)
        self.stopping = threading.Event()
        self.http = requests.Session()

    def request(self) -> requests.Response:
        if self.kind == "create":
            body = {"data": sample_tender(self.rng)}
            return self.http.post(f"{self.api_url}/tenders", json=body, timeout=60)
        if self.kind == "patch":
            tender_id = self.rng.choice(self.ids)
            body = {"data": {"title": " ".join(self.rng.choice(WORDS) for _ in range(4))}}
            return self.http.patch(f"{self.api_url}/tenders/{tender_id}", json=body, timeout=60)
        return self.http.get(f"{self.api_url}/tenders", params={"limit": 50}, timeout=60)

    def run(self) -> None:
        while not self.stopping.is_set():
            started = time.monotonic()
            try:
                response = self.request()
            except requests.RequestException:
                self.ledger.record(Outcome(self.kind, 0, time.monotonic() - started, started))
                continue
            outcome = Outcome(self.kind, response.status_code, time.monotonic() - started, started)
            try:
                body = response.json()
            except ValueError:
                body = None
            if response.status_code >= 400:
                outcome.json_error = isinstance(body, dict) and body.get("status") == "error"
                outcome.retry_after = response.headers.get("Retry-After")
            elif self.kind == "create" and response.status_code == 201:
                with self.ledger.lock:
                    self.ledger.created.add(body["data"]["id"])
            elif self.kind == "patch" and response.status_code == 200:
                data = body["data"]
                with self.ledger.lock:
                    previous = self.ledger.patched.get(data["id"], "")
                    self.ledger.patched[data["id"]] = max(previous, data["dateModified"])
            self.ledger.record(outcome)
            if response.status_code == 503:
                self.stopping.wait(0.05)
        self.http.close()


@pytest.fixture
def database(tmp_path: Any) -> Iterator[EmbeddedServer]:
    """An embedded server of this test's own, restartable with its data."""
    server = EmbeddedServer(storage_path=str(tmp_path / "db"), port=free_port())
    server.start()
    yield server
    server.stop()


def wait_until(check: Any, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.1)
    return False


def feed_answers(api_url: str) -> bool:
    try:
        return requests.get(f"{api_url}/tenders", timeout=10).status_code == 200
    except requests.RequestException:
        return False


@pytest.mark.timeout(120)
def test_database_outage(database: EmbeddedServer) -> None:
    settings = {
        "mongodb.uri": database.uri,
        "mongodb.db_name": DB_NAME,
        "feed.watermark_seconds": "0.2",
        "mongodb.server_selection_timeout_ms": str(SELECTION_TIMEOUT_MS),
        "demo.write_delay_ms": "0-5",
    }
    server = DemoServer(settings, threads=8).start()
    ledger = Ledger()
    workers: list[Worker] = []
    try:
        ids = create_tenders(server.api_url, 10, seed=7)
        ledger.created.update(ids)
        workers = [
            Worker(kind, server.api_url, ids, ledger, seed)
            for seed, kind in enumerate(("create", "create", "patch", "patch", "read", "read"))
        ]
        for worker in workers:
            worker.start()
        # counts of answers, not spans of time (a loaded machine answers fewer a second)
        assert wait_until(lambda: ledger.kinds(0, {200, 201}) == KINDS, 60), "the workers were not served"

        database.stop()  # takes a while: requests started meanwhile may succeed
        down_at = time.monotonic()
        # the outage lasts a few server selections, and until every kind of request was refused in it
        time.sleep(2.5 * SELECTION_TIMEOUT_MS / 1000)
        assert wait_until(lambda: ledger.kinds(down_at, {503}) == KINDS, 60), "not every kind was refused"
        up_at = time.monotonic()
        database.start()  # same port, same data folder
        assert wait_until(lambda: feed_answers(server.api_url), 30), "the feed did not recover"
        recovered_at = time.monotonic()
        assert wait_until(lambda: ledger.kinds(recovered_at, {200, 201}) == KINDS, 60), "not every kind served"
        # and served again once more each: what follows a kind's first success is checked below
        served = {
            kind: min(
                o.started
                for o in ledger.outcomes
                if o.kind == kind and o.started > recovered_at and o.status in (200, 201)
            )
            for kind in KINDS
        }
        assert wait_until(
            lambda: all(
                any(o.kind == kind and o.started > after for o in list(ledger.outcomes))
                for kind, after in served.items()
            ),
            60,
        )
    finally:
        for worker in workers:
            worker.stopping.set()
        for worker in workers:
            worker.join(timeout=30)
        server.close()

    outcomes = ledger.outcomes
    statuses = {outcome.status for outcome in outcomes}
    # 504: a write sent as the server went down, its outcome unknown
    # (the acknowledged ones are checked below: only 2xx count as written)
    assert statuses <= {200, 201, 409, 503, 504}, sorted(statuses)
    assert all(o.status != 409 for o in outcomes if o.kind != "patch")
    during = [o for o in outcomes if down_at < o.started < up_at]
    assert during, "no request was made during the outage"
    assert {o.kind for o in during if o.status == 503} == {"create", "patch", "read"}
    for outcome in outcomes:
        if outcome.status in (503, 504):
            assert outcome.json_error and outcome.retry_after, outcome
    slowest = max(o.seconds for o in during)
    assert slowest < HANG_SECONDS, f"a request took {slowest:.1f} s during the outage"
    # back: once a kind of request was served after the restart, every later one is
    after = [o for o in outcomes if o.started > served[o.kind]]
    assert {o.kind for o in after} == KINDS
    assert all(o.status in (200, 201, 409) for o in after), sorted({o.status for o in after})

    client: MongoClient = MongoClient(database.uri, serverSelectionTimeoutMS=5000)
    try:
        stored = {doc["_id"]: doc["dateModified"] for doc in client[DB_NAME].tenders.find({}, {"dateModified": 1})}
    finally:
        client.close()
    lost = ledger.created - set(stored)
    assert not lost, f"{len(lost)} acknowledged creates were lost"
    stale = {i: d for i, d in ledger.patched.items() if stored.get(i, "") < d}
    assert not stale, f"{len(stale)} acknowledged patches were lost"
    assert len(ledger.created) > 10 and ledger.patched
