"""The sequencer on the real server: forward-only entries, backfill, recovery
after the resume token left the oplog, two sequencers at once, ``kill -9``
in the middle of a stream, a clean stop, and the ``sequence`` command."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from bson.timestamp import Timestamp
from conftest import wait_sequenced
from pymongo import MongoClient

from openprocurement_feed.cli import main as cli_main
from openprocurement_feed.commit.sequencer import (
    CollectionSequencer,
    PositionCounter,
    Sequencer,
    predecessor,
    successor,
)
from openprocurement_feed.store.database import FeedStore
from openprocurement_feed.store.offset import Offset, ids_digest
from openprocurement_feed.store.orders import STATE_ID, positions_name, row_position

SCRIPT = Path(sys.executable).with_name("openprocurement-feed")


def put(store: FeedStore, count: int, prefix: str = "d", **fields: Any) -> list[dict[str, Any]]:
    collection = store.collection("tenders")
    return [
        store.save_data(collection, {"_id": f"{prefix}{n:04d}", "status": "active", **fields}, insert=True)
        for n in range(count)
    ]


def crawl_ids(store: FeedStore, limit: int = 50) -> list[str]:
    """Every id of the commit-ordered feed, in feed order."""
    ids: list[str] = []
    offset = None
    collection = store.collection("tenders")
    while True:
        rows = store.feed_page(collection, [], offset=offset, limit=limit, order="commit")
        if not rows:
            return ids
        ids.extend(row["_id"] for row in rows if "_feed_hidden" not in row)
        last = row_position(rows[-1])
        group = [row["_id"] for row in rows if row_position(row) == last]
        offset = Offset(last, len(group), ids_digest(group), "committed_ts")


@pytest.fixture
def store(mongodb_uri: str, db_name: str) -> Iterator[FeedStore]:
    client: MongoClient = MongoClient(mongodb_uri)
    yield FeedStore(client, db_name, watermark_seconds=0.2)
    client.close()


def test_positions_step_forward_and_back() -> None:
    assert successor(Timestamp(5, 7)) == Timestamp(5, 8)
    assert successor(Timestamp(5, 2**32 - 1)) == Timestamp(6, 0)
    assert predecessor(Timestamp(5, 0)) == Timestamp(4, 2**32 - 1)
    assert predecessor(successor(Timestamp(9, 3))) == Timestamp(9, 3)


def test_backfill_positions_follow_public_modified_below_the_ceiling() -> None:
    counter = PositionCounter(Timestamp(1000, 5))
    got = [counter.next(stamp) for stamp in (10.5, 10.7, 10.7, 12.0, 5000.0, 5001.0)]
    assert got == sorted(got) and len(set(got)) == len(got), "strictly increasing"
    assert got[0] == Timestamp(10, 1) and got[1] == Timestamp(10, 2)
    assert all(position < Timestamp(1000, 5) for position in got), "below the start"
    floor = PositionCounter(Timestamp(1000, 5), floor=Timestamp(500, 3))
    assert floor.next(10.0) == Timestamp(500, 4), "recovery stays above the old checkpoint"


def test_entries_move_forward_only(store: FeedStore) -> None:
    follower = CollectionSequencer(store.collection("tenders"))
    newer = follower.entry({"_id": "x", "_rev": "2-b", "is_public": True}, Timestamp(200, 1))
    older = follower.entry({"_id": "x", "_rev": "1-a", "is_public": False}, Timestamp(100, 1))
    assert follower.write([newer]) == 1
    assert follower.write([older]) == 0, "an older event is a no-op"
    entry = store.db[positions_name("tenders")].find_one({"_id": "x"})
    assert entry["rev"] == "2-b" and entry["committed_ts"] == Timestamp(200, 1)
    assert follower.write([follower.tombstone("x", Timestamp(150, 1))]) == 0
    assert follower.write([follower.tombstone("x", Timestamp(300, 1))]) == 1
    assert store.db[positions_name("tenders")].find_one({"_id": "x"})["deleted"] is True


def test_backfill_orders_old_documents_before_new_ones(store: FeedStore) -> None:
    collection = store.collection("tenders")
    stamps = {"b-old": 1_600_000_000.25, "a-mid": 1_700_000_000.5, "c-mid": 1_700_000_000.5, "z-new": 1_700_000_100.0}
    for doc_id, stamp in reversed(list(stamps.items())):  # inserted newest first
        store.save_data(
            collection, {"_id": doc_id, "status": "active", "public_modified": stamp}, insert=True, modified=False
        )
    store.save_data(
        collection, {"_id": "draft", "status": "draft", "public_modified": 1.0}, insert=True, modified=False
    )
    sequencer = Sequencer(store.db, {"tenders": ()}).start()
    try:
        assert sequencer.wait_ready(timeout=30)
        state = store.db[positions_name("tenders")].find_one({"_id": STATE_ID})
        entries = {e["_id"]: e for e in store.db[positions_name("tenders")].find({"_id": {"$ne": STATE_ID}})}
        assert set(entries) == set(stamps), "every public document, no draft"
        assert all(entry["committed_ts"] < state["start"] for entry in entries.values())
        assert state["checkpoint"] == predecessor(state["start"])
        assert sequencer.followers[0].stats.backfilled == 4
        assert crawl_ids(store) == ["b-old", "a-mid", "c-mid", "z-new"]
        store.save_data(collection, dict(collection.find_one({"_id": "b-old"}), title="changed"))
        wait_sequenced(store.db)
        assert crawl_ids(store) == ["a-mid", "c-mid", "z-new", "b-old"], "a change moves it forward"
    finally:
        sequencer.stop()


def test_two_sequencers_at_once_lose_nothing(store: FeedStore) -> None:
    put(store, 30)
    sequencers = [Sequencer(store.db, {"tenders": ()}).start() for _ in range(2)]
    collection = store.collection("tenders")
    stop = threading.Event()
    committed: list[str] = []  # one entry per committed save, appended by the writers

    def writer(number: int) -> None:
        while not stop.is_set():
            doc_id = f"d{(number * 7 + int(time.monotonic() * 1000)) % 30:04d}"
            doc = collection.find_one({"_id": doc_id})
            try:
                with store.client.start_session() as session, session.start_transaction():
                    store.save_data(collection, dict(doc, title=uuid.uuid4().hex), session=session)
            except Exception:  # a conflict between the writers: try another
                continue
            committed.append(doc_id)  # the transaction committed

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(3)]
    try:
        assert all(sequencer.wait_ready(timeout=30) for sequencer in sequencers)
        for thread in threads:
            thread.start()
        # A number of commits, not a span of time: a loaded machine commits fewer per second.
        deadline = time.monotonic() + 60
        while len(committed) < 30 and time.monotonic() < deadline:
            time.sleep(0.05)
        stop.set()
        for thread in threads:
            thread.join()
        wait_sequenced(store.db)
        # the checkpoint is the quicker one's: give the other time to catch up
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(s.followers[0].stats.events < len(committed) for s in sequencers):
            time.sleep(0.05)
        assert all(sequencer.alive for sequencer in sequencers)
    finally:
        stop.set()
        for sequencer in sequencers:
            sequencer.stop()
    assert len(committed) >= 30, f"the writers committed only {len(committed)} saves in 60 s"
    followed = [s.followers[0].stats.events for s in sequencers]
    assert all(count >= len(committed) for count in followed), f"each followed every commit: {followed}"
    revs = {doc["_id"]: doc["_rev"] for doc in collection.find({}, {"_rev": 1})}
    entries = {e["_id"]: e["rev"] for e in store.db[positions_name("tenders")].find({"_id": {"$ne": STATE_ID}})}
    assert entries == revs, "every entry holds its document's latest revision"
    assert sorted(crawl_ids(store)) == sorted(revs)


def write_ini(path: Path, uri: str, db_name: str) -> Path:
    path.write_text(
        "[app:main]\nuse = egg:openprocurement_feed#demo\n"
        f"mongodb.uri = {uri}\nmongodb.db_name = {db_name}\nfeed.order = commit\n"
    )
    return path


def start_sequence(ini: Path, *flags: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [str(SCRIPT), "sequence", str(ini), "--progress-every", "0.5", *flags],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for_state(store: FeedStore, key: str, timeout: float = 60.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = store.db[positions_name("tenders")].find_one({"_id": STATE_ID}) or {}
        if state.get(key) is not None:
            return state
        time.sleep(0.05)
    raise AssertionError(f"the sequencer saved no {key!r} within {timeout} s")


def sequencer_connections(client: MongoClient[Any]) -> int:
    """The server's connections opened by a sequencer process (its
    ``appName``), idle ones included."""
    from openprocurement_feed.roles import SEQUENCER

    ops = client.admin.command("currentOp", {"$all": True})["inprog"]
    return sum(1 for op in ops if ((op.get("clientMetadata") or {}).get("application") or {}).get("name") == SEQUENCER)


def wait_until(check: Any, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what}: not within {timeout:g} s"
        time.sleep(0.02)


def test_kill_9_mid_stream_loses_nothing_and_repeats_only_what_was_in_flight(
    store: FeedStore, mongodb_uri: str, db_name: str, tmp_path: Path
) -> None:
    ini = write_ini(tmp_path / "app.ini", mongodb_uri, db_name)
    put(store, 20)
    tokens: list[Mapping[str, Any]] = []  # every change's resume token, in stream order
    watching = threading.Event()
    stop_watch = threading.Event()

    def watch() -> None:  # the stream the sequencer follows, event by event
        with store.collection("tenders").watch(max_await_time_ms=50) as stream:
            watching.set()
            while True:
                stopping = stop_watch.is_set()
                event = stream.try_next()
                if event is not None:
                    tokens.append(event["_id"])
                elif stopping:  # writes ended before: an empty read is the end
                    break

    watcher = threading.Thread(target=watch)
    watcher.start()
    assert watching.wait(10)
    first = start_sequence(ini)
    collection = store.collection("tenders")
    stop_writes = threading.Event()
    written = [0]  # the writer's saves so far

    def write() -> None:
        number = 0
        while not stop_writes.is_set():
            doc = collection.find_one({"_id": f"d{number % 20:04d}"})
            store.save_data(collection, dict(doc, title=str(number)))
            number += 1
            written[0] = number
            time.sleep(0.002)

    writer = threading.Thread(target=write)
    try:
        wait_for_state(store, "checkpoint")
        writer.start()
        saved = wait_for_state(store, "token")["token"]
        # in the middle of the stream: its saved token moved on while the writes go on
        wait_until(
            lambda: (store.db[positions_name("tenders")].find_one({"_id": STATE_ID}) or {}).get("token") != saved,
            "the sequencer saved a second token",
        )
        assert sequencer_connections(store.client) > 0, "the sequencer's connections are seen by their appName"
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        # writes after the kill: some come after its last saved token, however slow the machine
        killed_at = written[0]
        wait_until(lambda: written[0] >= killed_at + 10, "10 writes after the kill")
    finally:
        stop_writes.set()
        writer.join()
    # A bulk write the killed process sent just before dying is still applied
    # by the server: read once its connections are gone (their commands run).
    wait_until(lambda: sequencer_connections(store.client) == 0, "the killed process's connections closed")
    state = store.db[positions_name("tenders")].find_one({"_id": STATE_ID})
    assert state is not None
    stop_watch.set()
    watcher.join()
    assert first.returncode == -signal.SIGKILL
    # Counted in stream order, by resume token: a change's clusterTime says
    # when it committed, not where the stream delivers it.
    assert state["token"] in tokens, "the saved token is one of the stream's events"
    pending = len(tokens) - tokens.index(state["token"]) - 1
    second = start_sequence(ini)
    try:
        wait_sequenced(store.db, timeout=30)
        # Every document's entry can be current before the last event is
        # handled (an earlier event's looked-up document already held the
        # last write): wait for the saved token to reach the last event.
        deadline = time.monotonic() + 30
        while True:
            saved = store.db[positions_name("tenders")].find_one({"_id": STATE_ID}) or {}
            if saved.get("token") == tokens[-1]:
                break
            assert time.monotonic() < deadline, "the restart reached the stream's last event within 30 s"
            time.sleep(0.05)
    finally:
        second.send_signal(signal.SIGTERM)
        _, err = second.communicate(timeout=30)
    assert second.returncode == 0, err
    handled = int(re.search(r"tenders: (\d+) events", err).group(1))
    assert pending > 0, "writes went on after the last saved token"
    assert handled == pending, "the restart handles exactly what came after the saved token"
    assert sorted(crawl_ids(store)) == sorted(doc["_id"] for doc in collection.find({}, {"_id": 1}))


def test_sigterm_stops_after_the_batch_with_token_and_checkpoint_saved(
    store: FeedStore, mongodb_uri: str, db_name: str, tmp_path: Path
) -> None:
    ini = write_ini(tmp_path / "app.ini", mongodb_uri, db_name)
    put(store, 5)
    process = start_sequence(ini)
    try:
        wait_for_state(store, "checkpoint")
        put(store, 5, prefix="later")
        wait_sequenced(store.db)
    finally:
        # its stop prints a last progress line: no pause for one
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    assert "Traceback" not in err
    assert re.search(r"events/s, \d+ stamped", err), "a progress line"
    assert "Sequencer stopped after" in err and "5 backfilled" in err
    state = store.db[positions_name("tenders")].find_one({"_id": STATE_ID})
    assert state["token"] and state["checkpoint"] >= state["token_ts"]


@pytest.mark.server  # starts a server or a process of its own
def test_recovery_restamps_exactly_the_changed_documents(tmp_path: Path) -> None:
    from openprocurement_feed.embedded.server import EmbeddedServer

    with EmbeddedServer(extra_args=("--oplog-max-entries", "50")) as server:
        client: MongoClient = MongoClient(server.uri)
        store = FeedStore(client, "recovery", watermark_seconds=0.2)
        put(store, 10)
        sequencer = Sequencer(store.db, {"tenders": ()}).start()
        assert sequencer.wait_ready(timeout=30)
        collection = store.collection("tenders")
        store.save_data(collection, dict(collection.find_one({"_id": "d0000"}), title="seen"))
        old_checkpoint = wait_sequenced(store.db)
        sequencer.stop()
        positions = store.db[positions_name("tenders")]
        before = {e["_id"]: e for e in positions.find({"_id": {"$ne": STATE_ID}})}
        changed = ["d0002", "d0005", "d0007"]
        for doc_id in changed:
            store.save_data(collection, dict(collection.find_one({"_id": doc_id}), title="while down"))
        collection.delete_one({"_id": "d0009"})
        filler = store.db["other"]
        for number in range(1000):  # push the saved token out of the oplog
            filler.insert_one({"n": number})
        restarted = Sequencer(store.db, {"tenders": ()}).start()
        try:
            assert restarted.wait_ready(timeout=30)
            wait_sequenced(store.db)
            stats = restarted.followers[0].stats
            after = {e["_id"]: e for e in positions.find({"_id": {"$ne": STATE_ID}})}
        finally:
            restarted.stop()
            client.close()
    moved = {doc_id for doc_id in after if after[doc_id]["committed_ts"] != before[doc_id]["committed_ts"]}
    assert moved == set(changed) | {"d0009"}, "exactly the changed and the deleted documents"
    assert all(after[doc_id]["committed_ts"] > old_checkpoint for doc_id in moved)
    assert after["d0009"]["deleted"] is True
    assert stats.recovered == 4


@pytest.mark.parametrize(
    "argv, message",
    [
        (["sequence", "/nonexistent/app.ini"], "no readable ini file"),
        (["sequence", "{ini}", "--batch-size", "0"], "expected an integer >= 1"),
        (["sequence", "{ini}", "--progress-every", "-1"], "expected a number"),
    ],
)
def test_sequence_flags_are_checked(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ini = tmp_path / "app.ini"
    ini.write_text("[app:main]\nuse = egg:openprocurement_feed#demo\n")
    with pytest.raises(SystemExit) as exit_info:
        cli_main([part.replace("{ini}", str(ini)) for part in argv])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_sequence_needs_a_commit_ordered_feed(
    mongodb_uri: str, db_name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ini = tmp_path / "app.ini"
    ini.write_text(
        f"[app:main]\nuse = egg:openprocurement_feed#demo\nmongodb.uri = {mongodb_uri}\nmongodb.db_name = {db_name}\n"
    )
    assert cli_main(["sequence", str(ini)]) == 2
    err = capsys.readouterr().err
    assert "no commit-ordered feed" in err and "feed.order = commit" in err
    assert "Traceback" not in err


def test_sequence_reports_a_bad_setting_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ini = tmp_path / "app.ini"
    ini.write_text(
        "[app:main]\nuse = egg:openprocurement_feed#demo\nmongodb.uri = embedded://\nfeed.order = sideways\n"
    )
    assert cli_main(["sequence", str(ini)]) == 2
    err = capsys.readouterr().err
    assert "feed.order" in err and "sideways" in err and "watermark, commit" in err
    assert "Traceback" not in err
    assert os.environ.get("FEED_SEQUENCER") is None, "the command leaves the environment as it was"


def test_sequence_observe_measures_a_watermark_feed_and_writes_no_positions(
    store: FeedStore, mongodb_uri: str, db_name: str, tmp_path: Path
) -> None:
    from openprocurement_feed.operations.health import HEALTH_COLLECTION

    ini = tmp_path / "app.ini"
    ini.write_text(
        f"[app:main]\nuse = egg:openprocurement_feed#demo\nmongodb.uri = {mongodb_uri}\nmongodb.db_name = {db_name}\n"
    )
    process = start_sequence(ini, "--observe")
    try:
        deadline = time.monotonic() + 60
        while store.db[HEALTH_COLLECTION].find_one({"_id": "tenders"}) is None:
            assert time.monotonic() < deadline, "the observer published nothing"
            time.sleep(0.1)
        began = time.time()
        put(store, 5)
        # each write's start-to-commit lag lies within the span of the writes (a
        # loaded machine stretches both alike); 1 ms: the commit's wallTime is in ms
        span_ms = (time.time() - began) * 1000 + 1
        deadline = time.monotonic() + 30
        while (store.db[HEALTH_COLLECTION].find_one({"_id": "tenders"}) or {})["lag_ms"]["count"] < 5:
            assert time.monotonic() < deadline, "the observer did not measure the writes"
            time.sleep(0.1)
        health = store.db[HEALTH_COLLECTION].find_one({"_id": "tenders"})
    finally:
        # its stop prints a last progress line: no pause for one
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    assert health["role"] == "observer" and health["lag_ms"]["count"] == 5, health
    assert 0 <= health["lag_ms"]["max"] <= span_ms, (health["lag_ms"], span_ms)
    assert "tenders (observed)" in err and "start-to-commit lag" in err
    assert positions_name("tenders") not in store.db.list_collection_names()
