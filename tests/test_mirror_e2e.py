"""The mirror against the demo API on loopback, into an SQLite file and a
real PostgreSQL: it follows the feed into one row per object and checks in
sync; rows damaged straight in ``feed_objects`` are reported exactly by
``verify --db --json`` and repaired; a ``kill -9`` mid-run loses nothing and
takes no row back; bad input is one line, exit 2, and nothing written;
``export`` and ``--import`` move a JSON-lines copy out and in."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from reconcile_support import Feed, crawl, serve

from openprocurement_feed.cli import main
from openprocurement_feed.demo.load import create_tenders

pytestmark = [pytest.mark.timeout(180), pytest.mark.server]

PAST = "2020-01-02T03:04:05.678901+02:00"


@pytest.fixture
def feed(settings: dict[str, str]) -> Iterator[Feed]:
    """The demo API (watermark order, its follower in process) on loopback."""
    for tamper, api, registry in serve(dict(settings, **{"feed.sequencer": "thread"})):
        yield Feed(api, tamper, registry, "watermark")


def held(sql: Callable[..., list[Any]], feed: str = "tenders") -> dict[str, str]:
    return dict(sql("SELECT id, date_modified FROM feed_objects WHERE feed = :feed", feed=feed))


def settle(feed: Feed, timeout: float = 30.0) -> dict[str, str]:
    """The server's documents, once the reconcile endpoint shows every one
    below its horizon."""
    import requests

    from openprocurement_feed.reconcile.records import timestamp_us

    versions = feed.database()
    latest = max(timestamp_us(stamp) for stamp in versions.values())

    def settled() -> bool:
        response = requests.get(f"{feed.api}/feeds/tenders/reconcile", timeout=10)
        if response.status_code != 200:  # 503 while the aggregates catch up
            return False
        answer = response.json()
        return bool(answer["until"] > latest and answer["records"] == len(versions))

    wait_for(settled, timeout, f"the feed did not show {len(versions)} tenders below its horizon")
    return versions


def mirror_once(feed: Feed, db: str, *extra: str) -> int:
    return main(["mirror", feed.url, "--db", db, "--once", "--no-progress", *extra])


def test_the_mirror_follows_the_feed_and_checks_in_sync(
    feed: Feed, database_url: str, sql: Callable[..., list[Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    create_tenders(feed.api, 30, seed=1)
    versions = settle(feed)
    assert mirror_once(feed, database_url, "--limit", "7") == 0
    err = capsys.readouterr().err
    assert "check of tenders: in sync: 1 round(s), 0 difference(s), 0 repaired" in err, err
    assert held(sql) == versions
    state = sql("SELECT last_check_result, next_offset, backward_done FROM feed_state WHERE feed = 'tenders'")
    assert state[0][0] == "in sync" and state[0][1] and state[0][2]
    # a replayed run changes nothing; export prints the copy in the feed's order
    assert mirror_once(feed, database_url) == 0
    capsys.readouterr()
    assert main(["export", "--db", database_url]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {line["id"]: line["dateModified"] for line in lines} == versions and len(lines) == len(versions)


def test_bad_rows_are_reported_exactly_and_repaired(
    feed: Feed, database_url: str, sql: Callable[..., list[Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    ids = create_tenders(feed.api, 40, seed=2)
    versions = settle(feed)
    assert mirror_once(feed, database_url, "--verify-every", "0") == 0
    missing, stale = sorted(ids[1:4]), sorted(ids[10:14])
    extra = sorted(uuid.UUID(int=number + 7).hex for number in range(3))
    for key in missing:
        sql("DELETE FROM feed_objects WHERE id = :id", id=key)
    for key in stale:
        sql(
            "UPDATE feed_objects SET date_modified = :date, modified_us = modified_us - 1000000 WHERE id = :id",
            id=key,
            date=PAST,
        )
    for key in extra:
        sql(
            "INSERT INTO feed_objects (feed, id, date_modified, modified_us, data) "
            "VALUES ('tenders', :id, :date, 1577927045678901, '{}')",
            id=key,
            date=PAST,
        )
    capsys.readouterr()
    assert main(["verify", feed.url, "--db", database_url, "--json"]) == 1
    found = json.loads(capsys.readouterr().out)
    assert (found["missing"], found["stale"], found["extra"], found["changed"]) == (missing, stale, extra, [])

    assert main(["verify", feed.url, "--db", database_url, "--repair", "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert found["in_sync"] and found["rounds"] == 1
    assert found["before_repair"]["missing"] == missing
    assert held(sql) == versions
    assert sql("SELECT last_check_result FROM feed_state")[0][0] == "in sync"


def start_mirror(url: str, db: str, *extra: str) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "openprocurement_feed.cli", "mirror", url, "--db", db, "--no-progress", *extra]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def wait_for(what: Callable[[], Any], timeout: float, message: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = what()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(message)
        time.sleep(0.02)


def pages_written(sql: Callable[..., list[Any]]) -> int:
    try:
        rows = sql("SELECT pages FROM feed_state WHERE feed = 'tenders'")
    except Exception:  # the schema not made yet
        return 0
    return int(rows[0][0]) if rows else 0


def test_a_kill_9_mid_run_loses_nothing_and_takes_no_row_back(
    feed: Feed, database_url: str, sql: Callable[..., list[Any]]
) -> None:
    create_tenders(feed.api, 120, seed=3)
    versions = settle(feed)
    for target in (3, 9, 15):
        process = start_mirror(feed.url, database_url, "--limit", "2", "--verify-every", "0", "--once")
        try:
            wait_for(lambda target=target: pages_written(sql) >= target, 60, f"no page {target} written")
        finally:
            os.kill(process.pid, signal.SIGKILL)
            process.wait(timeout=30)
        # the rows and the position committed together: the position counts every row
        items, count = sql("SELECT items, (SELECT count(*) FROM feed_objects) FROM feed_state")[0]
        assert items == count, (target, items, count)
    assert main(["mirror", feed.url, "--db", database_url, "--once", "--no-progress"]) == 0
    assert held(sql) == versions
    assert sql("SELECT count(*), count(DISTINCT id) FROM feed_objects")[0] == (len(versions), len(versions))
    assert sql("SELECT last_check_result FROM feed_state")[0][0] == "in sync"


def one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith("openprocurement-feed mirror: "), err
    return err


def test_bad_input_is_one_line_exit_2_and_nothing_written(
    feed: Feed, tmp_path: Path, database_url: str, sql: Callable[..., list[Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    fresh = tmp_path / "fresh.db"
    # a database URL of another scheme; a feed URL of another scheme
    assert main(["mirror", feed.url, "--db", "mysql://user@127.0.0.1/feeds"]) == 2
    assert "unsupported database URL scheme mysql://" in one_line(capsys)
    assert main(["mirror", "ftp://127.0.0.1/tenders", "--db", str(fresh)]) == 2
    assert "http:// or https://" in one_line(capsys)
    # an unreachable database: no such folder, no server on that socket
    assert main(["mirror", feed.url, "--db", str(tmp_path / "none" / "copy.db")]) == 2
    assert "does not exist" in one_line(capsys)
    assert main(["mirror", feed.url, "--db", f"postgresql://mirror@/x?host={tmp_path}&port=1"]) == 2
    assert "cannot open the database" in one_line(capsys)
    # a feed that answers no reconcile endpoint
    assert main(["mirror", f"{feed.api}/nothing", "--db", str(fresh)]) == 2
    assert "reconcile endpoint" in one_line(capsys)
    assert not fresh.exists()
    # a schema of another version: the database stays as it was
    create_tenders(feed.api, 3, seed=4)
    settle(feed)
    assert mirror_once(feed, database_url) == 0
    sql("UPDATE feed_schema SET version = 2")
    before = sql("SELECT id, date_modified FROM feed_objects ORDER BY id"), sql("SELECT * FROM feed_state")
    create_tenders(feed.api, 2, seed=5)
    capsys.readouterr()
    assert mirror_once(feed, database_url) == 2
    assert "schema of version 2" in one_line(capsys)
    assert (sql("SELECT id, date_modified FROM feed_objects ORDER BY id"), sql("SELECT * FROM feed_state")) == before


def test_a_json_lines_copy_moves_in_and_its_first_check_repairs_what_it_lacks(
    feed: Feed, tmp_path: Path, database_url: str, sql: Callable[..., list[Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    create_tenders(feed.api, 20, seed=6)
    versions = settle(feed)
    copy = crawl(feed, tmp_path, versions)
    oldest = sorted(versions, key=versions.__getitem__)[:2]  # not on the newest page the mirror reads
    lines = [line for line in copy.read_text().splitlines() if json.loads(line)["id"] != oldest[0]]
    lines.append(json.dumps({"id": oldest[1], "removed": True}))
    copy.write_text("\n".join(lines) + "\n")
    assert mirror_once(feed, database_url, "--import", str(copy), "--limit", "5") == 0
    err = capsys.readouterr().err
    assert "Imported 20 line(s)" in err
    assert "check of tenders: repaired" in err and "2 missing" in err, err
    assert held(sql) == versions
    assert sql("SELECT pages FROM feed_state")[0][0] <= 1  # the history was not read again
