"""The sequencer when its database is out of reach: the follower counts a
restart and waits instead of dying, the owner reports it not ready; and the
small helpers it keys and batches events with."""

from __future__ import annotations

import threading
import time
from typing import Any

from pymongo import MongoClient

from openprocurement_feed.commit.sequencer import Sequencer
from openprocurement_feed.commit.stamps import chunks as _chunks
from openprocurement_feed.commit.stamps import hashable as _hashable
from openprocurement_feed.embedded.server import free_port


def unreachable_db() -> Any:
    """A database on a loopback port nothing listens on, failing fast."""
    client: MongoClient[Any] = MongoClient(
        f"mongodb://127.0.0.1:{free_port()}/", serverSelectionTimeoutMS=100, connectTimeoutMS=100
    )
    return client, client["feed_test"]


def test_a_follower_retries_a_database_it_cannot_reach() -> None:
    client, db = unreachable_db()
    sequencer = Sequencer(db, {"tenders": ()})
    (follower,) = sequencer.followers
    stopping = threading.Event()
    thread = threading.Thread(target=follower.run, args=(stopping, 0.05), daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while follower.stats.restarts < 2:
        assert time.monotonic() < deadline, "the follower never retried"
        time.sleep(0.05)
    stopping.set()
    thread.join(timeout=10)
    assert not thread.is_alive() and follower.stats.checkpoint is None
    client.close()


def test_the_owner_is_not_ready_while_its_followers_cannot_start() -> None:
    client, db = unreachable_db()
    sequencer = Sequencer(db, {"tenders": ()}, observed=["plans", "tenders"])
    assert [follower.observe for follower in sequencer.followers] == [False, True]  # tenders is not observed twice
    assert not sequencer.alive
    sequencer.start()
    try:
        assert sequencer.alive
        polls: list[float] = []
        assert sequencer.wait_ready(timeout=0.3, poll=polls.append) is False
        assert polls and sequencer.errors == []
    finally:
        sequencer.stop()
        client.close()
    assert not sequencer.alive


def test_a_failed_follower_ends_the_wait_for_readiness() -> None:
    client, db = unreachable_db()
    sequencer = Sequencer(db, {"tenders": ()})
    sequencer.errors.append(RuntimeError("the positions collection is damaged"))
    started = time.monotonic()
    assert sequencer.wait_ready(timeout=30) is False
    assert time.monotonic() - started < 5
    client.close()


def test_event_keys_and_batches() -> None:
    assert _hashable("a") == "a" and _hashable(7) == 7
    assert _hashable({"x": [1]}) == "{'x': [1]}"  # an unhashable _id still keys a dict
    assert list(_chunks(({"n": n} for n in range(5)), 2)) == [[{"n": 0}, {"n": 1}], [{"n": 2}, {"n": 3}], [{"n": 4}]]
    assert list(_chunks([], 3)) == []


def test_a_read_of_the_stream_that_does_not_return_counts_as_a_failure() -> None:
    from openprocurement_feed.commit.entries import SequencerStats

    stats = SequencerStats()
    assert stats.failure(2.0) is None
    stats.reading()
    began = stats.reading_since
    assert began is not None
    assert stats.failure(2.0, now=began + 1.9) is None  # a read takes its time
    since, why = stats.failure(2.0, now=began + 2.5) or (0.0, "")
    assert since == began and "has not returned for 2.5 s" in why
    stats.read()
    assert stats.failure(2.0, now=began + 60) is None
    stats.reading()
    stats.failed(ConnectionError("gone"))  # the driver gave up: its error says more
    assert stats.reading_since is None and stats.failure(2.0) == (stats.failing_since, "ConnectionError: gone")
