"""An observer reopening its stream after an error resumes where it
stopped, whatever the server thinks of its tokens.

The stream's token after an empty read is the server's post-batch token,
which may name the latest entry of the whole database: the embedded server
names a command of the database there (another collection's index made),
and refuses to resume a collection's stream from it (code 13), where
MongoDB accepts it. The observer then resumes from its
last event's own token, or, when it measured none, from the time of its
first start; what committed meanwhile is measured, nothing is reported
unmeasured. Driven directly (no thread): open, read, close as an error
would, write, open again.
"""

from __future__ import annotations

import time
from typing import Any

from pymongo import MongoClient

from openprocurement_feed.commit.collection import CollectionSequencer


def read_until(observer: CollectionSequencer, stream: Any, wanted: int, timeout: float = 30.0) -> list[Any]:
    """Batches of ``stream``, handled, until ``wanted`` events were read
    and a read came back empty; the events."""
    events: list[Any] = []
    deadline = time.monotonic() + timeout
    while True:
        batch, caught_up = observer.read_batch(stream)
        observer.handle(stream, batch, caught_up)
        events.extend(batch)
        if len(events) >= wanted and caught_up:
            return events
        assert time.monotonic() < deadline, f"read {len(events)} of {wanted} events"


def other_writes(client: MongoClient[Any], db_name: str) -> None:
    """Another collection made and indexed (as a keeper starting beside the
    observer does): the latest entries of the oplog name the database's
    commands, not a collection."""
    client[db_name].others.insert_one({"n": 1})
    client[db_name].others.create_index("n")


def test_an_observer_resumes_after_another_collections_write(mongo_client: MongoClient[Any], db_name: str) -> None:
    observer = CollectionSequencer(mongo_client[db_name].tenders, observe=True)
    with observer.open() as stream:
        mongo_client[db_name].tenders.insert_one({"_id": "first"})
        assert [event["documentKey"]["_id"] for event in read_until(observer, stream, 1)] == ["first"]
        other_writes(mongo_client, db_name)
        read_until(observer, stream, 0)  # its token moves past them
    assert observer.event_token is not None
    mongo_client[db_name].tenders.insert_one({"_id": "meanwhile"})  # while it is closed
    with observer.open() as stream:
        events = read_until(observer, stream, 1)
    assert [event["documentKey"]["_id"] for event in events] == ["meanwhile"]
    assert observer.stats.unmeasured is None


def test_an_observer_that_measured_nothing_resumes_from_its_start(mongo_client: MongoClient[Any], db_name: str) -> None:
    observer = CollectionSequencer(mongo_client[db_name].tenders, observe=True)
    with observer.open() as stream:
        other_writes(mongo_client, db_name)
        read_until(observer, stream, 0)
    assert observer.event_token is None and observer.observed_since is not None
    mongo_client[db_name].tenders.insert_one({"_id": "meanwhile"})
    with observer.open() as stream:
        events = read_until(observer, stream, 1)
    assert [event["documentKey"]["_id"] for event in events] == ["meanwhile"]
    assert observer.stats.unmeasured is None
