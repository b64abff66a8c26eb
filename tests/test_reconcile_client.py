"""The reconcile client through the real server: the demo API on loopback in
both orders, a crawler's copy made by ``sync``, objects removed from it, made
stale and added, reported exactly by ``verify`` and repaired by ``--repair``;
an object changed during a check; the library on a crawler's own store."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from reconcile_support import Feed, crawl, latest_lines, read_lines, serve, write_lines

from openprocurement_feed.cli import main
from openprocurement_feed.client.reconcile import reconcile_feed
from openprocurement_feed.demo.load import create_tenders

pytestmark = [pytest.mark.timeout(180), pytest.mark.server]

#: A dateModified long past: an extra line's version, below any horizon.
PAST = "2020-01-02T03:04:05.678901+02:00"


@pytest.fixture(params=["watermark", "commit"])
def feed(request: pytest.FixtureRequest, settings: dict[str, str]) -> Iterator[Feed]:
    """The demo API in either order behind the tamper, its sequencer in process."""
    order = str(request.param)
    for tamper, api, registry in serve(dict(settings, **{"feed.order": order, "feed.sequencer": "thread"})):
        yield Feed(api, tamper, registry, order)


def verify_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, object], str]:
    """Run ``verify ... --json``: its exit status, the JSON, stderr."""
    status = main(["verify", *argv, "--json"])
    captured = capsys.readouterr()
    return status, json.loads(captured.out), captured.err


def damaged_copy(feed: Feed, folder: Path) -> tuple[Path, list[str], list[str], list[str]]:
    """A copy from ``sync`` with 3 objects removed, 3 made stale (patched on
    the server after the sync) and 2 extra: the copy and the three lists."""
    ids = create_tenders(feed.api, 24, seed=7)
    copy = crawl(feed, folder, feed.database())
    missing, stale = sorted(ids[2:5]), sorted(ids[10:13])
    extra = sorted(uuid.UUID(int=number + 1).hex for number in range(2))
    kept = [line for line in read_lines(copy) if line["id"] not in missing]
    write_lines(copy, [*kept, *({"id": key, "dateModified": PAST} for key in extra)])
    feed.settle({key: feed.patch(key, f"patched {key}") for key in stale})
    return copy, missing, stale, extra


def test_verify_reports_the_differences_exactly_and_repair_leaves_the_copy_in_sync(
    feed: Feed, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copy, missing, stale, extra = damaged_copy(feed, tmp_path)

    status, found, err = verify_json(capsys, feed.url, "--items", str(copy))
    assert status == 1, err
    assert (found["missing"], found["stale"], found["extra"], found["changed"]) == (missing, stale, extra, [])
    assert found["rounds"] >= 1 and found["bytes_sent"] > 0 and found["bytes_received"] > 0
    assert "round 1:" in err and "Traceback" not in err

    assert main(["verify", feed.url, "--items", str(copy), "--repair"]) == 0
    captured = capsys.readouterr()
    assert "8 difference(s)" in captured.out and "In sync after the repair" in captured.out
    assert f"Missing (3): {', '.join(missing)}" in captured.out
    assert "Repair: appended 8 line(s)" in captured.err
    held = latest_lines(copy)
    assert {key: line["dateModified"] for key, line in held.items()} == feed.database()
    assert all(set(held[key]) == {"id", "dateModified"} for key in missing + stale)  # the feed's items

    status, found, err = verify_json(capsys, feed.url, "--items", str(copy))
    assert status == 0 and found["in_sync"] is True and found["rounds"] == 1, err
    assert found["copy_records"] == found["feed_records"] == len(feed.database())


def test_repair_with_fetch_appends_whole_objects_as_sync_fetch_writes_them(
    feed: Feed, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copy, missing, stale, extra = damaged_copy(feed, tmp_path)
    before = len(read_lines(copy))
    status, found, _ = verify_json(capsys, feed.url, "--items", str(copy), "--repair", "--fetch")
    assert status == 0 and found["rounds"] == 1 and found["recheck_bytes"] == 0  # nothing read again
    first = found["before_repair"]
    assert isinstance(first, dict) and (first["missing"], first["stale"], first["extra"]) == (missing, stale, extra)
    appended = read_lines(copy)[before:]
    whole = {line["id"]: line for line in appended if not line.get("removed")}
    assert sorted(whole) == sorted(missing + stale)
    assert all(line["tenderID"].startswith("UA-") and "items" in line for line in whole.values())
    assert sorted(line["id"] for line in appended if line.get("removed") is True) == extra


def test_an_object_changed_during_the_check_is_reported_as_changed_not_as_a_difference(
    feed: Feed, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ids = create_tenders(feed.api, 12, seed=3)
    copy = crawl(feed, tmp_path, feed.database())
    moved = ids[4]

    def patch_now() -> None:  # after the horizon was read, before the first round is answered
        held = {key: line["dateModified"] for key, line in latest_lines(copy).items()}
        held[moved] = feed.patch(moved, "changed during the check")
        wait_reconciled(feed, held)  # the endpoint's records show the change (the follower kept it)

    feed.tamper.before_post = patch_now
    status, found, err = verify_json(capsys, feed.url, "--items", str(copy))
    assert feed.tamper.posts >= 1
    assert status == 0, err
    assert found["changed"] == [moved]
    assert (found["missing"], found["stale"], found["extra"]) == ([], [], [])

    # the next sync picks the change up, and the copy checks in sync
    crawl(feed, tmp_path, feed.database())
    status, found, _ = verify_json(capsys, feed.url, "--items", str(copy))
    assert status == 0 and found["changed"] == [] and found["rounds"] == 1


def wait_reconciled(feed: Feed, held: dict[str, str], timeout: float = 20.0) -> None:
    """Wait until a check of ``held`` (nested inside the tampered one: the
    tamper's hook is spent) finds it in sync."""
    deadline = time.monotonic() + timeout
    while not reconcile_feed(feed.url, held.items(), recheck=False).in_sync:
        assert time.monotonic() < deadline, f"the endpoint did not show {held} within {timeout} s"
        time.sleep(0.05)


def test_the_library_checks_a_crawlers_own_store(feed: Feed) -> None:
    create_tenders(feed.api, 15, seed=5)
    held = feed.database()
    feed.settle(dict(list(held.items())[-1:]))
    reports = []
    result = reconcile_feed(feed.url, held.items(), on_round=reports.append)
    assert result.in_sync and result.rounds == 1 and [report.round for report in reports] == [1]
    assert result.copy_records == result.feed_records == 15

    gone = sorted(held)[:2]
    store = [(key, stamp) for key, stamp in held.items() if key not in gone]
    store.append((uuid.UUID(int=99).hex.upper(), "2021-06-01T00:00:00Z"))  # an id in upper case is read lower
    result = reconcile_feed(feed.url, store)
    assert (result.missing, result.stale, result.extra, result.changed) == (gone, [], [uuid.UUID(int=99).hex], [])
    assert not result.in_sync and result.differences == 3
    assert result.rechecked == 1 and result.recheck_bytes > 0

    # a version of the copy above the horizon is left out of the comparison on both sides
    future = [*held.items(), (uuid.UUID(int=100).hex, "2999-01-01T00:00:00+00:00")]
    assert reconcile_feed(feed.url, future).in_sync

    with pytest.raises(ValueError, match="not 32 hexadecimal digits"):
        reconcile_feed(feed.url, [("not-an-id", "2021-06-01T00:00:00Z")])


def test_sync_verify_checks_the_copy_once_caught_up(
    feed: Feed, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    create_tenders(feed.api, 10, seed=9)
    crawl(feed, tmp_path, feed.database())  # the feed shows them all
    capsys.readouterr()
    out = tmp_path / "second.jsonl"
    argv = ["sync", feed.url, "--state", str(tmp_path / "s2.json"), "--out", str(out), "--no-progress", "--verify"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "Synced 10 items" in captured.err and "In sync: 10 objects" in captured.out
    out.write_text(out.read_text().splitlines(keepends=True)[0])  # the copy loses nine objects
    assert main(argv) == 1
    assert "Missing (9)" in capsys.readouterr().out
