"""The race, healed at small scale: the demo in the watermark order with
W = 0 under write load (a write stays open 5-40 ms after its stamp: crawlers
lose versions), a mirror into SQLite and another into PostgreSQL, each
``kill -9``-ed three times during the run and restarted. After the writers
stop and the mirrors reach the head, each one's first check reports exactly
the objects whose version it lacks (against the server's own documents) and
repairs them; the next check is in sync in one round."""

from __future__ import annotations

import os
import signal
import subprocess
from typing import Any

import pytest
import requests
from test_mirror_e2e import start_mirror, wait_for

from openprocurement_feed.cli import main
from openprocurement_feed.client.mirror import Mirror, MirrorStore
from openprocurement_feed.reconcile.records import timestamp_us

pytestmark = [pytest.mark.timeout(240), pytest.mark.server, pytest.mark.slow]

WRITE_DELAY = "5-40"


def rows_of(url: str) -> dict[str, str]:
    with MirrorStore.open(url) as store:
        return {key: date for key, date in store.rows("tenders")}


def pages_of(url: str) -> int:
    try:
        with MirrorStore.open(url) as store:
            state = store.load_state("tenders")
    except Exception:  # made by the mirror's first page
        return 0
    return int(state["pages"]) if state else 0


def server_versions(registry: Any) -> dict[str, str]:
    collection = registry.feed_store.collection("tenders")
    query = {"is_public": True, "is_test": False}
    return {doc["_id"]: doc["dateModified"] for doc in collection.find(query, {"dateModified": 1})}


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
        ids = create_many(server.api_url, 150, large=False)
        writers = [LoggingWriter(server.api_url, ids, name=f"writer-{number}") for number in range(6)]
        for writer in writers:
            writer.start()
        processes: dict[str, subprocess.Popen[bytes]] = {}
        try:
            follow = ("--limit", "5", "--verify-every", "0", "--longpoll", "2")
            processes = {db: start_mirror(url, db, *follow) for db in databases}
            for _ in range(3):  # kill -9 each mirror once it wrote more pages, then restart it
                for db, process in processes.items():
                    before = pages_of(db)
                    wait_for(lambda db=db, before=before: pages_of(db) > before + 2, 60, f"{db}: no new pages")
                    os.kill(process.pid, signal.SIGKILL)
                    process.wait(timeout=30)
                    processes[db] = start_mirror(url, db, *follow)
        finally:
            for writer in writers:
                writer.stop()
            for writer in writers:
                writer.join(timeout=30)
            for process in processes.values():
                process.send_signal(signal.SIGTERM)
                process.wait(timeout=60)
        versions = server_versions(server.app.registry)
        latest = max(timestamp_us(stamp) for stamp in versions.values())
        wait_for(
            lambda: (
                requests.get(server.api_url + "/feeds/tenders/reconcile", timeout=10).json().get("until", 0) > latest
            ),
            30,
            "the horizon did not pass the last write",
        )
        for db in databases:
            # the head, without a check; then what this mirror lacks against the server's documents
            assert main(["mirror", url, "--db", db, "--once", "--verify-every", "0", "--no-progress"]) == 0
            rows = rows_of(db)
            missing = sorted(key for key in versions if key not in rows)
            stale = sorted(key for key in versions if key in rows and rows[key] != versions[key])
            extra = sorted(key for key in rows if key not in versions)
            with MirrorStore.open(db) as store, Mirror(url, store) as mirror:
                first = mirror.check(fail=True)
                assert first is not None
                found = (first.result.missing, first.result.stale, first.result.extra, first.result.changed)
                assert found == (missing, stale, extra, []), db
                assert first.repaired == len(missing) + len(stale) + len(extra)
                second = mirror.check(fail=True)
                assert second is not None and second.result.in_sync and second.result.rounds == 1
            assert rows_of(db) == versions
            with capsys.disabled():
                print(f"\n{db.split(':')[0]}: first check: {first.line('tenders')}")
