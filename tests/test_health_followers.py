"""The health verdict from the data, with the follower in a process of its
own (``openprocurement-feed sequence``, the production shape): a sequencer
whose writes fail, one stopped with SIGSTOP and one killed turn a commit
feed ``at-risk`` within the threshold (plus slack) after the last of 10
patches, with no write after them, and back to ``ok``; the watermark
order's observer likewise turns its feed ``unknown``. The observer resumes
its stream where it stopped after an error (what committed meanwhile is
measured), and says so in health when it could not.

One embedded server for the module, started with ``--enable-test-commands``;
the faults are ``failCommand`` fail points aimed at the sequencer's
``appName``. Each test proves its fault struck: the driver's command
monitoring in the follower's process (:class:`~openprocurement_feed.roles.CommandLog`,
its file named by ``OPENPROCUREMENT_FEED_COMMAND_LOG``) counts the commands
the fault failed, or the stopped process's state in ``/proc`` shows it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from conftest import wait_sequenced
from pymongo import MongoClient
from webtest import TestApp

from openprocurement_feed import shutdown
from openprocurement_feed.demo import main
from openprocurement_feed.embedded.server import EmbeddedServer
from openprocurement_feed.faults.failpoint import FailPoint
from openprocurement_feed.faults.strikes import CommandLogFile
from openprocurement_feed.roles import COMMAND_LOG_ENV, SEQUENCER
from openprocurement_feed.testing import make_settings

#: starts servers and processes of its own (make test-unit leaves it out)
pytestmark = pytest.mark.server

SCRIPT = Path(sys.executable).with_name("openprocurement-feed")
TENDERS = "/api/2.5/tenders"
HEALTH = "/api/2.5/feeds/health"
#: ``feed.checkpoint_threshold_seconds`` of these tests
THRESHOLD = 2.0
#: what the verdict may take beyond the threshold after the last patch
#: (the issue's bound; measured here: well under a second)
SLACK = 2.0
#: the least time a fault stays armed: longer than the threshold plus 2 s
HOLD = THRESHOLD + 2.5
PATCHES = 10
#: a failCommand error of a node going away, on every update of the follower
WRITES_FAIL = {
    "mode": "alwaysOn",
    "data": {"failCommands": ["update"], "errorCode": 91, "appName": SEQUENCER},
}


#: Seconds the module's server keeps an idle transaction open: a follower
#: killed or stopped inside its aggregates' transaction leaves it open, and
#: ``secantusd-py``'s 60 s (its reads stalled behind it) outlast a test.
LIFETIME = 2
LAUNCHER = Path(__file__).resolve().parent.parent / "ops" / "secantusd_lifetime.py"


@pytest.fixture(scope="module")
def fault_uri() -> Iterator[str]:
    """A server of this module's own that accepts ``configureFailPoint`` and
    aborts a transaction left open for :data:`LIFETIME` seconds."""
    launcher = (sys.executable, str(LAUNCHER), str(LIFETIME))
    with EmbeddedServer(extra_args=("--enable-test-commands",), launcher=launcher) as server:
        yield server.uri


@pytest.fixture
def fail(fault_uri: str) -> Iterator[FailPoint]:
    """The fail point, off again after the test whatever happens."""
    point = FailPoint(fault_uri)
    try:
        yield point
    finally:
        point.close()


class Follower:
    """``openprocurement-feed sequence INI`` as a child process, its stderr
    collected line by line."""

    def __init__(self, ini: Path, *flags: str) -> None:
        #: the driver's command monitoring of its clients, a JSON line per failed command
        self.commands = CommandLogFile(str(ini.with_name(f"commands-{uuid.uuid4().hex[:8]}.jsonl")))
        self.process = subprocess.Popen(
            [str(SCRIPT), "sequence", str(ini), "--progress-every", "1", *flags],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=dict(os.environ, **{COMMAND_LOG_ENV: self.commands.path}),
        )
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.append(f"{time.monotonic():.2f} {line.rstrip()}")

    def failed(self, commands: tuple[str, ...], code: int) -> int:
        """How many of ``commands`` its sequencer client sent failed with ``code``."""
        return sum(
            1
            for record in self.commands.since(0)
            if record.get("app") == SEQUENCER
            and record.get("command") in commands
            and record.get("failed")
            and record.get("code") == code
        )

    def logged(self, *texts: str) -> int:
        """The lines that hold every one of ``texts``."""
        return sum(all(text in line for text in texts) for line in list(self.lines))

    def state(self) -> str:
        """The process's state letter in ``/proc`` (``T``: stopped)."""
        stat = Path(f"/proc/{self.process.pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self.reader.join(10)
        if self.process.stderr is not None:
            self.process.stderr.close()


class Feed:
    """The demo API on the fault server (a database of its own), its own
    sequencer off: the follower runs in its own process."""

    def __init__(self, uri: str, tmp_path: Path, order: str) -> None:
        self.name = f"followers_{uuid.uuid4().hex[:10]}"
        self.uri = uri
        self.order = order
        extra = {
            "feed_order": order,
            "feed_sequencer": "off",
            "feed_checkpoint_threshold_seconds": str(THRESHOLD),
            # the demo's patches take tens of ms, 100+ on a loaded machine:
            # a margin the watermark verdict does not count against them
            "feed_watermark_seconds": "2",
            "feed_metrics_path": "/metrics",
        }
        self.app = main({}, **make_settings(uri, self.name, **extra))
        self.web = TestApp(self.app)
        self.ini = tmp_path / "app.ini"
        self.ini.write_text(
            "[app:main]\nuse = egg:openprocurement_feed#demo\n"
            f"mongodb.uri = {uri}\nmongodb.db_name = {self.name}\nfeed.order = {order}\n"
            f"feed.checkpoint_threshold_seconds = {THRESHOLD}\n"
        )
        self.followers: list[Follower] = []
        self.tenders = [self.web.post_json(TENDERS, {"data": {"title": f"t{n}"}}).json["data"]["id"] for n in range(5)]

    def follow(self) -> Follower:
        flags = ("--observe",) if self.order == "watermark" else ()
        follower = Follower(self.ini, *flags)
        self.followers.append(follower)
        return follower

    def tender(self) -> dict[str, Any]:
        body = self.web.get(HEALTH, status="*").json
        return dict(next(feed for feed in body["feeds"] if feed["name"] == "tenders"))

    def wait(self, check: Callable[[dict[str, Any]], bool], what: str, timeout: float = 60.0) -> dict[str, Any]:
        """The health body of the feed once ``check`` holds, within ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            feed = self.tender()
            if check(feed):
                return feed
            if time.monotonic() >= deadline:
                lines = "\n".join(self.lines()[-60:])
                raise AssertionError(f"{what}: not within {timeout:g} s; last: {feed}\nthe followers' lines:\n{lines}")
            time.sleep(0.05)

    def wait_ok(self, timeout: float = 60.0) -> dict[str, Any]:
        return self.wait(lambda feed: feed["verdict"] == "ok" and feed["watcher"]["running"], "ok", timeout)

    def patch(self, count: int = PATCHES) -> float:
        """``count`` patches, round the tenders; when the last was
        acknowledged, by the wall clock (the health view judges a write's
        wait by the database's clock, on this machine)."""
        began = time.monotonic()
        for number in range(count):
            tender = self.tenders[number % len(self.tenders)]
            self.web.patch_json(f"{TENDERS}/{tender}", {"data": {"description": f"p{number}-{uuid.uuid4().hex[:4]}"}})
        print(f"\n{count} patches in {time.monotonic() - began:.2f} s")
        return time.time()

    def lines(self) -> list[str]:
        """Every follower's log lines, for failure messages."""
        return [line[:300] for follower in self.followers for line in follower.lines if "events/s" not in line]

    def instruments(self) -> tuple[str, dict[str, float]]:
        """What ``monitor --check`` prints of the health view now, and the
        feed's verdict and distance gauges in a scrape of the metrics."""
        from prometheus_client.parser import text_string_to_metric_families

        from openprocurement_feed.commands.monitor import parse_health, summary_line

        line = summary_line(parse_health(self.web.get(HEALTH, status="*").json))
        gauges = {}
        for family in text_string_to_metric_families(self.web.get("/metrics").text):
            for sample in family.samples:
                if sample.labels.get("feed") == "tenders" and sample.name == "openprocurement_feed_verdict":
                    gauges[sample.labels["verdict"]] = sample.value
                if sample.labels.get("collection") == "tenders" and sample.name.endswith("_behind_seconds"):
                    gauges["behind"] = sample.value
        return line, gauges

    def close(self) -> None:
        for follower in self.followers:
            follower.stop()
        shutdown(self.app.registry)
        client: MongoClient[Any] = MongoClient(self.uri)
        try:
            client.drop_database(self.name)
        finally:
            client.close()


def open_feed(fault_uri: str, tmp_path: Path, order: str) -> Iterator[Feed]:
    """A :class:`Feed` of ``order``, closed after the test."""
    feed = Feed(fault_uri, tmp_path, order)
    try:
        yield feed
    finally:
        feed.close()


@pytest.fixture
def commit_feed(fault_uri: str, tmp_path: Path) -> Iterator[Feed]:
    yield from open_feed(fault_uri, tmp_path, "commit")


@pytest.fixture
def watermark_feed(fault_uri: str, tmp_path: Path) -> Iterator[Feed]:
    yield from open_feed(fault_uri, tmp_path, "watermark")


def stop_follower(follower: Follower) -> float:
    """SIGSTOP ``follower`` and wait until it is stopped; when it was sent."""
    follower.process.send_signal(signal.SIGSTOP)
    stopped = time.monotonic()
    deadline = stopped + 10
    while follower.state() != "T":
        assert time.monotonic() < deadline, "the process did not stop"
        time.sleep(0.01)
    return stopped


def bad(order: str) -> Callable[[dict[str, Any]], bool]:
    """The verdict a stuck follower must give: at-risk (commit order) or
    unknown or worse (watermark order)."""
    if order == "commit":
        return lambda feed: feed["verdict"] in ("at-risk", "violated")
    return lambda feed: feed["verdict"] in ("unknown", "at-risk", "violated")


def bad_by(
    feed: Feed, due: float, what: str, check: Callable[[dict[str, Any]], bool] | None = None
) -> tuple[dict[str, Any], float]:
    """Wait for the bad verdict (``check``, else :func:`bad`), which must
    hold in every health request begun at ``due`` (wall clock) or later;
    the body and when its request began.

    The verdict is computed from the data, by the database's clock, when
    the request runs: what a request begun after ``due`` says is what the
    feed's state was by then, however long the request or the polling took
    on a loaded machine (the time the verdict was *seen* is not compared).
    """
    check = check or bad(feed.order)
    while True:
        began = time.time()
        body = feed.tender()
        if check(body):
            return body, began
        lines = "\n".join(feed.lines()[-60:])
        assert began < due, (
            f"{what}: still {body['verdict']} in a request begun {began - due:.1f} s past its due time: {body}\n"
            f"the followers' lines:\n{lines}"
        )
        time.sleep(0.05)


def turns_bad_in_time(feed: Feed, last_patch: float) -> dict[str, Any]:
    """Wait for the bad verdict after the patches; it must hold in every
    health request begun the threshold plus :data:`SLACK` after the last
    patch's answer (``last_patch``, wall clock) or later."""
    body, began = bad_by(feed, last_patch + THRESHOLD + SLACK, "the stuck follower in the verdict")
    print(f"\n{feed.order}: {body['verdict']} in a request begun {began - last_patch:.2f} s after the last patch")
    print(body["reason"])
    return body


def struck(follower: Follower, commands: tuple[str, ...], code: int, times: int = 1, feed: Feed | None = None) -> int:
    """Wait until ``times`` of the follower's ``commands`` failed with
    ``code``, by the driver's command monitoring in its process; how many."""
    deadline = time.monotonic() + 60
    while follower.failed(commands, code) < times:
        last = "\n".join(line[:200] for line in follower.lines[-3:])
        health = feed.tender() if feed is not None else None
        assert time.monotonic() < deadline, f"the fault never struck: {health}\n{last}"
        time.sleep(0.05)
    return follower.failed(commands, code)


def hold(feed: Feed, armed: float, until: Callable[[], bool] = lambda: True) -> None:
    """Keep the fault for at least :data:`HOLD` s and until ``until()``
    (within a minute), the verdict bad throughout."""
    deadline = time.monotonic() + 60
    while time.monotonic() - armed < HOLD or not until():
        body = feed.tender()
        assert bad(feed.order)(body), body
        assert time.monotonic() < deadline, "the fault did not strike the follower itself:\n" + "\n".join(feed.lines())
        time.sleep(0.1)


def back_ok(feed: Feed) -> dict[str, Any]:
    body = feed.wait_ok()
    if feed.order == "commit":
        wait_sequenced(feed.app.registry.feed_store.db, timeout=30)
    return body


def measured(feed: Feed) -> dict[str, Any]:
    """``ok`` again, the patches measured (a follower stopped in the middle
    of a publication publishes it, its ``seen`` time late by the stop, just
    before it reads what was written meanwhile: ``ok`` may come first)."""
    return feed.wait(
        lambda body: body["verdict"] == "ok" and body["lag_ms"]["count"] >= PATCHES, "ok and the patches measured"
    )


def test_a_sequencer_whose_writes_fail_turns_the_commit_feed_at_risk_and_back(
    commit_feed: Feed, fail: FailPoint
) -> None:
    follower = commit_feed.follow()
    commit_feed.wait_ok()
    fail.arm(WRITES_FAIL)
    armed = time.monotonic()
    # struck: an idle sequencer's process writes every second (its figures)
    struck(follower, ("update",), 91, feed=commit_feed)
    body = turns_bad_in_time(commit_feed, commit_feed.patch())
    assert "is the sequencer running" in body["reason"], body
    # the metrics and the monitor say the same
    line, gauges = commit_feed.instruments()
    assert "tenders at-risk (a public write has waited" in line or "tenders at-risk (no sequencer" in line, line
    assert gauges["at-risk"] == 1 and gauges["ok"] == 0, gauges
    assert gauges.get("behind", 0) >= THRESHOLD or "no sequencer" in line, gauges
    hold(commit_feed, armed)
    failures = follower.failed(("update",), 91)
    fail.clear()
    back_ok(commit_feed)
    print(f"\n{failures} updates of the sequencer failed by the fault")


def test_a_stopped_sequencer_turns_the_commit_feed_at_risk_and_back(commit_feed: Feed) -> None:
    follower = commit_feed.follow()
    commit_feed.wait_ok()
    stopped = stop_follower(follower)
    turns_bad_in_time(commit_feed, commit_feed.patch())
    hold(commit_feed, stopped)
    follower.process.send_signal(signal.SIGCONT)
    back_ok(commit_feed)


def test_a_killed_sequencer_turns_the_commit_feed_at_risk_and_a_new_one_back(commit_feed: Feed) -> None:
    follower = commit_feed.follow()
    commit_feed.wait_ok()
    follower.process.send_signal(signal.SIGKILL)
    assert follower.process.wait(10) == -signal.SIGKILL
    killed = time.monotonic()
    turns_bad_in_time(commit_feed, commit_feed.patch())
    hold(commit_feed, killed)
    commit_feed.follow()
    back_ok(commit_feed)


def test_a_quiet_stuck_sequencer_shows_through_its_stale_figures(commit_feed: Feed) -> None:
    """No write at all: the sequencer's figures stop updating, and the
    verdict turns at-risk once they are stale."""
    from openprocurement_feed.operations.health import STALE_AFTER

    follower = commit_feed.follow()
    commit_feed.wait_ok()
    stopped = time.time()
    stop_follower(follower)
    # when it published its figures last (the database's clock, UTC): nothing can follow it now
    last = commit_feed.tender()
    updated = datetime.fromisoformat(last["watcher"]["updated"])
    published = (updated if updated.tzinfo else updated.replace(tzinfo=timezone.utc)).timestamp()
    body, began = bad_by(commit_feed, stopped + STALE_AFTER + SLACK, "the stale figures in the verdict")
    seen = time.time()
    print(f"\nquiet, stopped: at-risk in a request begun {began - stopped:.2f} s after the stop: {body['reason']}")
    # not before its figures were stale (seen after the database's clock said so)
    assert seen - published > STALE_AFTER, (seen - published, last, body)
    assert body["watcher"]["age_seconds"] > STALE_AFTER, body
    assert "no sequencer has published its figures" in body["reason"] and not body["watcher"]["running"]
    follower.process.send_signal(signal.SIGCONT)
    back_ok(commit_feed)


def test_an_observer_whose_writes_fail_turns_the_watermark_feed_unknown_and_back(
    watermark_feed: Feed, fail: FailPoint
) -> None:
    follower = watermark_feed.follow()
    watermark_feed.wait_ok()
    fail.arm(WRITES_FAIL)
    armed = time.monotonic()
    # struck: an observer's figures (one thread per collection, one client)
    # fail, the server is marked unknown, and its threads wait for it
    struck(follower, ("update",), 91, feed=watermark_feed)
    body = turns_bad_in_time(watermark_feed, watermark_feed.patch())
    assert "for the observer" in body["reason"] or "No watcher runs" in body["reason"], body
    hold(watermark_feed, armed)
    fail.clear()
    measured(watermark_feed)  # the writes made during the fault


def test_a_stopped_observer_turns_the_watermark_feed_unknown_and_back(watermark_feed: Feed) -> None:
    follower = watermark_feed.follow()
    watermark_feed.wait_ok()
    stopped = stop_follower(follower)
    turns_bad_in_time(watermark_feed, watermark_feed.patch())
    line, gauges = watermark_feed.instruments()
    assert line.startswith("unknown: ") and "tenders unknown (a public write has waited" in line, line
    assert gauges["unknown"] == 1 and gauges["ok"] == 0, gauges
    hold(watermark_feed, stopped)
    follower.process.send_signal(signal.SIGCONT)
    measured(watermark_feed)  # the writes made while it was stopped


def test_an_observer_resumes_after_an_error_and_measures_what_committed_meanwhile(
    watermark_feed: Feed, fail: FailPoint
) -> None:
    follower = watermark_feed.follow()
    before = watermark_feed.wait_ok()["lag_ms"]["count"]
    # its reads fail, and so does every reopening of its stream
    fail.arm(
        {
            "mode": "alwaysOn",
            "data": {"failCommands": ["getMore", "aggregate"], "errorCode": 91, "appName": SEQUENCER},
        }
    )
    reads = ("getMore", "aggregate")
    struck(follower, reads, 91, feed=watermark_feed)
    deadline = time.monotonic() + 60
    while not follower.logged("'tenders'", "retrying in"):  # the tenders observer itself
        assert time.monotonic() < deadline, "the tenders observer never failed:\n" + "\n".join(watermark_feed.lines())
        time.sleep(0.05)
    watermark_feed.patch()  # committed while the observer cannot read
    failures = struck(follower, reads, 91, times=follower.failed(reads, 91) + 1)  # and failed since
    fail.clear()
    body = watermark_feed.wait(
        lambda feed: feed["lag_ms"]["count"] >= before + PATCHES, "the writes made during the fault measured"
    )
    assert body["watcher"]["restarts"] >= 1 and failures >= 2, "\n".join(follower.lines)
    assert body["verdict"] == "ok" and "unmeasured" not in body["watcher"], body


def test_an_observer_that_cannot_resume_says_so_in_health(watermark_feed: Feed, fail: FailPoint) -> None:
    follower = watermark_feed.follow()
    watermark_feed.wait_ok()
    # a read fails, then its point has left the oplog when it reopens after it
    fail.arm(
        {
            "mode": "alwaysOn",
            "data": {"failCommands": ["getMore", "aggregate"], "errorCode": 286, "appName": SEQUENCER},
        }
    )
    deadline = time.monotonic() + 60
    while not follower.logged("'tenders'", "its resume point has left the oplog"):
        assert time.monotonic() < deadline, "the observer never met its lost point:\n" + "\n".join(follower.lines)
        time.sleep(0.05)
    fail.clear()
    body = watermark_feed.wait(lambda feed: "unmeasured" in feed["watcher"], "the lost stretch in the health view")
    assert body["verdict"] == "unknown" and "could not resume its stream" in body["reason"], body
    # it follows on from the present: a later write is measured
    count = body["lag_ms"]["count"]
    watermark_feed.patch(1)
    watermark_feed.wait(lambda feed: feed["lag_ms"]["count"] > count, "a later write measured")


def test_writes_of_the_checkpoints_own_second_are_judged_by_their_entries(
    mongo_client: MongoClient[Any], db_name: str
) -> None:
    """A write stamped within the checkpoint's second may be covered or not:
    its entry tells; one stamped after that second is not covered."""
    from bson.timestamp import Timestamp

    from openprocurement_feed.operations.coverage import oldest_uncovered
    from openprocurement_feed.store.orders import COMMITTED_TS, PUBLIC_MODIFIED, positions_name

    db = mongo_client[db_name]
    second = 1_800_000_000
    checkpoint = Timestamp(second, 5)
    db.tenders.insert_many(
        [
            {"_id": "covered", "is_public": True, PUBLIC_MODIFIED: second + 0.2},
            {"_id": "older-entry", "is_public": True, PUBLIC_MODIFIED: second + 0.6},
            {"_id": "no-entry", "is_public": True, PUBLIC_MODIFIED: second + 0.8},
            {"_id": "private", "is_public": False, PUBLIC_MODIFIED: second + 0.1},
        ]
    )
    db[positions_name("tenders")].insert_many(
        [
            {"_id": "covered", COMMITTED_TS: Timestamp(second, 3), PUBLIC_MODIFIED: second + 0.2},
            {"_id": "older-entry", COMMITTED_TS: Timestamp(second - 4, 1), PUBLIC_MODIFIED: second - 4.5},
        ]
    )
    later = second + 30.0
    assert oldest_uncovered(db, "tenders", checkpoint, later, 2.0) == second + 0.6
    db[positions_name("tenders")].update_one(
        {"_id": "older-entry"}, {"$set": {COMMITTED_TS: Timestamp(second, 4), PUBLIC_MODIFIED: second + 0.6}}
    )
    assert oldest_uncovered(db, "tenders", checkpoint, later, 2.0) == second + 0.8
    db[positions_name("tenders")].insert_one(
        {"_id": "no-entry", COMMITTED_TS: Timestamp(second + 1, 1), PUBLIC_MODIFIED: second + 0.8}
    )
    assert oldest_uncovered(db, "tenders", checkpoint, later, 2.0) == second + 0.8, "its entry is past the checkpoint"
    db[positions_name("tenders")].update_one({"_id": "no-entry"}, {"$set": {COMMITTED_TS: Timestamp(second, 5)}})
    assert oldest_uncovered(db, "tenders", checkpoint, later, 2.0) is None
    db.tenders.insert_one({"_id": "after", "is_public": True, PUBLIC_MODIFIED: second + 1.5})
    assert oldest_uncovered(db, "tenders", checkpoint, later, 2.0) == second + 1.5
    # the checkpoint's second too recent to have waited the threshold: its entries are not read
    db.tenders.update_one({"_id": "covered"}, {"$set": {PUBLIC_MODIFIED: second + 0.3}})
    assert oldest_uncovered(db, "tenders", checkpoint, second + 1.0, 2.0) == second + 1.5
    assert oldest_uncovered(db, "tenders", checkpoint, later, 2.0) == second + 0.3


def test_the_oldest_write_after_a_point_is_read_in_doubling_windows(mongodb_uri: str, db_name: str) -> None:
    """The oldest public write above a point, found by windows of stamps
    that double: each read examines the writes of its window only (a stuck
    checkpoint's hour of writes is not read at each scrape)."""
    from pymongo import monitoring

    from openprocurement_feed.operations.coverage import first_stamp_after
    from openprocurement_feed.store.orders import PUBLIC_MODIFIED

    class Reads(monitoring.CommandListener):
        def __init__(self) -> None:
            self.windows: list[Any] = []

        def started(self, event: monitoring.CommandStartedEvent) -> None:
            if event.command_name == "find":
                self.windows.append(event.command["filter"][PUBLIC_MODIFIED])

        def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
            pass

        def failed(self, event: monitoring.CommandFailedEvent) -> None:
            pass

    reads = Reads()
    client: MongoClient[Any] = MongoClient(mongodb_uri, event_listeners=[reads])
    try:
        db = client[db_name]
        low = 1_800_000_000.0
        db.tenders.insert_many(
            [{"_id": f"w{i}", "is_public": True, PUBLIC_MODIFIED: low + 5.5 + i * 0.1} for i in range(50)]
            + [{"_id": "private", "is_public": False, PUBLIC_MODIFIED: low + 0.5}]
        )
        assert first_stamp_after(db, "tenders", low, low + 3600) == low + 5.5
        # windows (low, low+1], (low+1, low+3], (low+3, low+7]: the third holds it
        assert reads.windows == [
            {"$gt": low, "$lte": low + 1},
            {"$gt": low + 1, "$lte": low + 3},
            {"$gt": low + 3, "$lte": low + 7},
        ]
        reads.windows.clear()
        assert first_stamp_after(db, "tenders", low + 6.0, low + 3600) == low + 5.5 + 6 * 0.1
        assert len(reads.windows) == 1
        # past the clock the last window is open; nothing after: None
        assert first_stamp_after(db, "tenders", low, low + 2) == low + 5.5
        assert first_stamp_after(db, "tenders", low + 11, low + 3600) is None
    finally:
        client.close()
