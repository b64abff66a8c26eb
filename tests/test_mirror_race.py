"""The race, healed: the demo in the watermark order with W = 0 under write
load (a write stays open 5-40 ms after its stamp: crawlers lose versions), a
mirror into SQLite and another into PostgreSQL, each ``kill -9``-ed three
times during the run and restarted.

The race itself loses versions only now and then (a patch whose stamp the
crawl passed before it committed, and no later patch of the same tender), so
the run also makes the loss it causes for certain, with the server's own
tool for writes of a given stamp (``save_data(modified=False)``, what
fixtures and migrations use), while the writers go on: versions stamped
below what both mirrors already read, as a write that committed late is:
new tenders (the mirrors lack them), new versions of tenders no writer
touches (the mirrors hold an older one), and tenders deleted straight from
the collection (the mirrors hold what the feed no longer shows).

After the writers stop and the mirrors reach the head, what each mirror
lacks is computed from its rows and the server's documents, independently of
the check; each mirror's first check reports exactly that (nonempty:
missing, stale and extra), repairs it, and the next check is in sync in one
round: every object at the server's version, none older, none extra, no
repeated row."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import requests
from test_mirror_e2e import start_mirror, wait_for

from openprocurement_feed.cli import main
from openprocurement_feed.client.mirror import Mirror, MirrorStore
from openprocurement_feed.reconcile.records import timestamp_us

pytestmark = [pytest.mark.timeout(240), pytest.mark.server, pytest.mark.slow]

WRITE_DELAY = "5-40"
WRITERS = 8
#: tenders the writers patch
PATCHED = 120
#: tenders no writer touches: the late versions' and the deletions' targets
QUIET = 12
#: late writes of each kind: new tenders, new versions of quiet ones, deletions
LATE_NEW, LATE_STALE, LATE_GONE = 5, 5, 3


def rows_of(url: str) -> dict[str, str]:
    with MirrorStore.open(url) as store:
        return {key: date for key, date in store.rows("tenders")}


def repeated_rows(url: str) -> int:
    """Rows of an id that another row of the feed has too."""
    from sqlalchemy import text

    with MirrorStore.open(url) as store, store.engine.connect() as connection:
        query = "SELECT COUNT(*) - COUNT(DISTINCT id) FROM feed_objects WHERE feed = 'tenders'"
        return int(connection.execute(text(query)).scalar() or 0)


def state_of(url: str) -> dict[str, Any]:
    try:
        with MirrorStore.open(url) as store:
            return store.load_state("tenders") or {}
    except Exception:  # the schema is made with the mirror's first page
        return {}


def server_versions(registry: Any) -> dict[str, str]:
    collection = registry.feed_store.collection("tenders")
    query = {"is_public": True, "is_test": False}
    return {doc["_id"]: doc["dateModified"] for doc in collection.find(query, {"dateModified": 1})}


def later(date_modified: str, milliseconds: int = 1) -> datetime:
    return datetime.fromisoformat(date_modified) + timedelta(milliseconds=milliseconds)


def write_late(registry: Any, quiet: list[str], before: datetime, seed: int = 7) -> dict[str, set[str]]:
    """The late writes (see the module), by the server's own tools: ids of
    each kind. ``before`` precedes every stamp the feed served (the tenders
    were created after it): new tenders are stamped just below it; a quiet
    tender's new version 1 ms after its last (long passed: the writers'
    patches came after it)."""
    from openprocurement_feed.demo.load import sample_tender

    store = registry.feed_store
    collection = store.collection("tenders")
    rng = random.Random(seed)
    made: set[str] = set()
    for number in range(LATE_NEW):
        moment = before - timedelta(seconds=10 - number)
        doc = sample_tender(rng)
        doc.pop("mode", None)
        key = uuid.UUID(int=rng.getrandbits(128)).hex
        stamp = moment.isoformat()
        doc.update(_id=key, dateCreated=stamp, dateModified=stamp, public_modified=round(moment.timestamp(), 3))
        doc.update(status="active.tendering", owner="broker")
        store.save_data(collection, doc, insert=True, modified=False)
        made.add(key)
    stale: set[str] = set()
    for key in quiet[:LATE_STALE]:
        doc = collection.find_one({"_id": key})
        moment = later(doc["dateModified"])
        doc.update(title="changed late", dateModified=moment.isoformat())
        doc["public_modified"] = round(doc["public_modified"] + 0.001, 3)
        store.save_data(collection, doc, modified=False)
        stale.add(key)
    gone = set(quiet[LATE_STALE : LATE_STALE + LATE_GONE])
    collection.delete_many({"_id": {"$in": sorted(gone)}})
    return {"missing": made, "stale": stale, "extra": gone}


def test_the_race_healed_by_the_first_check(
    mongodb_uri: str, db_name: str, tmp_path: Any, postgresql_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from openprocurement_feed.demo.server import DemoServer
    from openprocurement_feed.race.load import LoggingWriter, create_many

    settings = {
        "mongodb.uri": mongodb_uri,
        "mongodb.db_name": db_name,
        "feed.order": "watermark",
        "feed.sequencer": "thread",
        "feed.watermark_seconds": "0",
        "demo.write_delay_ms": WRITE_DELAY,
    }
    databases = [f"sqlite:///{tmp_path / 'mirror.db'}", postgresql_url]
    with DemoServer(settings, threads=16) as server:
        url = server.api_url + "/tenders"
        before = datetime.now(timezone.utc)
        quiet = create_many(server.api_url, QUIET, large=False)
        ids = create_many(server.api_url, PATCHED, large=False)
        writers = [LoggingWriter(server.api_url, ids, name=f"writer-{number}") for number in range(WRITERS)]
        for writer in writers:
            writer.start()
        processes: dict[str, subprocess.Popen[bytes]] = {}
        try:
            follow = ("--limit", "5", "--verify-every", "0", "--longpoll", "2")
            processes = {db: start_mirror(url, db, *follow) for db in databases}
            for _ in range(3):  # kill -9 each mirror once it wrote more pages, then restart it
                for db, process in processes.items():
                    held = int(state_of(db).get("pages") or 0)
                    wait_for(lambda db=db, held=held: int(state_of(db).get("pages") or 0) > held + 2, 60, db)
                    os.kill(process.pid, signal.SIGKILL)
                    process.wait(timeout=30)
                    processes[db] = start_mirror(url, db, *follow)
            # the late writes once both mirrors read the whole history: below what they read
            for db in databases:
                wait_for(lambda db=db: state_of(db).get("backward_done"), 60, f"{db}: the history not read")
            late = write_late(server.app.registry, quiet, before)
            for db in databases:  # the mirrors follow on past them, the writers too
                held = int(state_of(db).get("pages") or 0)
                wait_for(lambda db=db, held=held: int(state_of(db).get("pages") or 0) > held + 2, 60, db)
        finally:
            for writer in writers:
                writer.stop()
            for writer in writers:
                writer.join(timeout=30)
            for process in processes.values():
                process.send_signal(signal.SIGTERM)
                process.wait(timeout=60)
        patches = sum(len(writer.acks) for writer in writers)
        versions = server_versions(server.app.registry)
        latest = max(timestamp_us(stamp) for stamp in versions.values())

        def settled() -> bool:
            response = requests.get(server.api_url + "/feeds/tenders/reconcile", timeout=10)
            answer = response.json() if response.status_code == 200 else {}
            return bool(answer.get("until", 0) > latest and answer.get("records") == len(versions))

        wait_for(settled, 30, "the reconcile endpoint did not show every tender below its horizon")
        for db in databases:
            # the head, without a check; then what this mirror lacks against the server's documents
            assert main(["mirror", url, "--db", db, "--once", "--verify-every", "0", "--no-progress"]) == 0
            rows = rows_of(db)
            missing = sorted(key for key in versions if key not in rows)
            stale = sorted(key for key in versions if key in rows and rows[key] != versions[key])
            extra = sorted(key for key in rows if key not in versions)
            # the late writes are among them, for certain
            assert late["missing"] <= set(missing) and late["stale"] <= set(stale) and late["extra"] == set(extra)
            with MirrorStore.open(db) as store, Mirror(url, store) as mirror:
                first = mirror.check(fail=True)
                assert first is not None
                found = (first.result.missing, first.result.stale, first.result.extra, first.result.changed)
                assert found == (missing, stale, extra, []), db
                assert first.repaired == len(missing) + len(stale) + len(extra)
                second = mirror.check(fail=True)
                assert second is not None and second.result.in_sync and second.result.rounds == 1
            assert rows_of(db) == versions and repeated_rows(db) == 0
            lost = len(missing) + len(stale) - len(late["missing"]) - len(late["stale"])
            with capsys.disabled():
                print(
                    f"\n{db.split(':')[0]}: {patches} patches, {len(versions)} tenders; the mirror lacked "
                    f"{len(missing)} missing, {len(stale)} stale, {len(extra)} extra ({lost} lost to the race "
                    f"itself); first check: {first.line('tenders')}"
                )
