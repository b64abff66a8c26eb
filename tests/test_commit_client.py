"""The reference crawler and the ``check`` command, unchanged, against a
commit-ordered feed (SPEC D) over real HTTP: with concurrent transactional
writers, and across a switch of the deployment's feed order in both
directions (offsets saved in one order, resumed in the other)."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from openprocurement_feed import shutdown
from openprocurement_feed.cli import main as cli_main
from openprocurement_feed.client import Batch, FeedSync
from openprocurement_feed.demo import main as demo_main
from openprocurement_feed.demo.load import PatchWriter, create_tenders
from openprocurement_feed.demo.server import DemoServer, ThreadedServer
from openprocurement_feed.store.offset import is_position_offset
from openprocurement_feed.store.orders import STATE_ID, positions_name

pytestmark = [pytest.mark.timeout(120), pytest.mark.server]

W = 0.2
#: The watermark of the deployments that switch order: long enough that the
#: last patches before a switch are certainly still hidden from the
#: watermark feed when a crawler reads it.
SWITCH_W = 1.0
#: Seconds to wait for the sequencer to cover the writes made so far.
SEQUENCED_TIMEOUT = 30.0


# -- helpers --------------------------------------------------------------------


def app_settings(
    mongodb_uri: str, db_name: str, order: str, delay: str = "5-40", watermark: float = W
) -> dict[str, str]:
    """Ini settings of the demo app in ``order``; a commit-ordered app runs
    its sequencer in a thread. Every write is a transaction held open
    ``delay`` ms after its stamp."""
    settings = {
        "mongodb.uri": mongodb_uri,
        "mongodb.db_name": db_name,
        "feed.watermark_seconds": str(watermark),
        "feed.order": order,
        "demo.write_delay_ms": delay,
    }
    if order == "commit":
        settings["feed.sequencer"] = "thread"
    return settings


def database_state(store: Any) -> dict[str, str]:
    """``{id: dateModified}`` of every public tender in the database."""
    return {
        doc["_id"]: doc["dateModified"]
        for doc in store.collection("tenders").find({"is_public": True}, {"dateModified": 1})
    }


def wait_sequenced(store: Any, timeout: float = SEQUENCED_TIMEOUT) -> None:
    """Wait until every tender's entry carries its current ``_rev`` and the
    published checkpoint covers every entry: a commit-ordered feed then
    shows every tender's current version."""
    tenders = store.collection("tenders")
    positions = store.collection(positions_name("tenders"))
    deadline = time.monotonic() + timeout
    while True:
        revs = {doc["_id"]: doc["_rev"] for doc in tenders.find({}, {"_rev": 1})}
        entries = {
            entry["_id"]: entry for entry in positions.find({"_id": {"$in": list(revs)}}, {"rev": 1, "committed_ts": 1})
        }
        checkpoint = (positions.find_one({"_id": STATE_ID}, {"checkpoint": 1}) or {}).get("checkpoint")
        if checkpoint is not None and all(
            key in entries and entries[key].get("rev") == rev and entries[key]["committed_ts"] <= checkpoint
            for key, rev in revs.items()
        ):
            return
        assert time.monotonic() < deadline, "the sequencer did not cover the writes"
        time.sleep(0.02)


def read_lines(path: Path) -> list[dict[str, Any]]:
    """The items of a JSON-lines file written by ``sync --out``."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def held(items: Iterable[dict[str, Any]]) -> dict[str, str]:
    """``{id: dateModified}`` of the last item of each tender."""
    return {item["id"]: item["dateModified"] for item in items}


def patch(api_url: str, ids: Iterable[str], title: str, http: requests.Session) -> None:
    for tender_id in ids:
        http.patch(f"{api_url}/tenders/{tender_id}", json={"data": {"title": title}}, timeout=30).raise_for_status()


class Collector:
    """A :class:`FeedSync` handler that keeps every delivered item, in order."""

    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []

    def __call__(self, batch: Batch) -> None:
        self.items.extend(batch.items)


class Crash(Exception):
    """The crawler 'dies' after handling a page, before saving its position."""


def crash_after(handler: Callable[[Batch], None], pages: int, direction: str) -> Callable[[Batch], None]:
    """``handler``, raising :class:`Crash` after its ``pages``-th page in ``direction``."""
    handled: list[Batch] = []

    def handle(batch: Batch) -> None:
        handler(batch)
        if batch.direction == direction:
            handled.append(batch)
            if len(handled) == pages:
                raise Crash

    return handle


class Deployment:
    """One HTTP address in front of whichever app is live.

    A switch of ``feed.order`` replaces the app behind the address, as a
    restart of the web workers would: crawlers keep their URL (and so their
    state files) and meet the other order on their next request.
    """

    def __init__(self, app: Any) -> None:
        self.app = app
        self.http = ThreadedServer(self, threads=4).start()
        self.api_url = f"{self.http.url}/api/2.5"

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        return self.app(environ, start_response)

    def switch(self, app: Any) -> None:
        self.app = app

    def close(self) -> None:
        self.http.close()


@pytest.fixture
def apps(mongodb_uri: str, db_name: str) -> Iterator[Callable[[str], Any]]:
    """Makes demo apps of one deployment on the test database
    (``apps("watermark")``, ``apps("commit")``), all with ``feed.watermark_seconds
    = SWITCH_W``; a commit-ordered one is returned once its sequencer has
    published a checkpoint. All are shut down after the test."""
    made: list[Any] = []

    def make(order: str) -> Any:
        app = demo_main({}, **app_settings(mongodb_uri, db_name, order, watermark=SWITCH_W))
        made.append(app)
        if order == "commit":
            assert app.registry.feed_sequencer.wait_ready(), app.registry.feed_sequencer.errors
        return app

    yield make
    for app in made:
        shutdown(app.registry)


def cli_sync(url: str, state: Path, out: Path) -> int:
    """``openprocurement-feed sync URL --state FILE --out FILE`` until caught up."""
    return cli_main(["sync", url, "--state", str(state), "--out", str(out), "--limit", "10", "--no-progress"])


# -- concurrent writers ---------------------------------------------------------


def test_crawler_and_check_against_a_commit_feed_under_concurrent_writers(
    mongodb_uri: str, db_name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Three writers patch 60 tenders at about 90/s in transactions held
    open 5-40 ms. The reference crawler (``sync --follow`` in its own
    process) crawls the history while they write and follows the changes;
    ``check`` runs meanwhile. The crawler ends with the latest version of
    every tender (never an older version after a newer one), ``check``
    finds 0 anomalies and exits 0, and a later ``sync`` resumes from the
    state file."""
    server = DemoServer(app_settings(mongodb_uri, db_name, "commit")).start()
    writers: list[PatchWriter] = []
    process: subprocess.Popen[str] | None = None
    try:
        assert server.registry.feed_sequencer.wait_ready()
        url = server.api_url + "/tenders"
        ids = create_tenders(server.api_url, 60, seed=21)
        state, out = tmp_path / "state.json", tmp_path / "items.jsonl"
        writers = [PatchWriter(server.api_url, ids, rate=30, seed=n, name=f"writer-{n}") for n in range(3)]
        for writer in writers:
            writer.start()
        time.sleep(0.3)
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "openprocurement_feed.cli",
                "sync",
                url,
                "--state",
                str(state),
                "--out",
                str(out),
                "--follow",
                "--poll",
                "0.05",
                "--limit",
                "10",
                "--no-progress",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        # a number of checks, not a span a loaded machine fits fewer into
        status = cli_main(["check", url, "--checks", "5", "--wait", "0.2", "--interval", "0.1", "--limit", "20"])
        report = capsys.readouterr().out
        # the load is the premise: a number of patches, however long a
        # loaded machine takes for them
        deadline = time.monotonic() + 60
        while sum(writer.stats.patches for writer in writers) <= 30:
            assert time.monotonic() < deadline, "the writers made 30 patches within 60 s"
            time.sleep(0.05)
        for writer in writers:
            writer.stop()
        for writer in writers:
            writer.join(timeout=10)
        # The load is the premise (about 270 patches in 3 s on an idle machine);
        # a busy machine writes fewer, which still exercises the race.
        assert sum(writer.stats.patches for writer in writers) > 30
        assert status == 0, report
        match = re.search(r"(\d+) checks in [\d.]+ s: 0 with late arrivals", report)
        assert match and int(match.group(1)) == 5, report

        store = server.registry.feed_store
        wait_sequenced(store)
        expected = database_state(store)
        deadline = time.monotonic() + 60

        def backward_done() -> bool:
            try:
                return bool(json.loads(state.read_text()).get("backward_done"))
            except (OSError, ValueError):
                return False

        # every version held and the history read through (saved): the events
        # the interrupt comes after, each waited for with a deadline
        while (held(read_lines(out)) != expected or not backward_done()) and time.monotonic() < deadline:
            time.sleep(0.1)
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=20)
        assert process.returncode == 130, err
        assert "Traceback" not in err

        items = read_lines(out)
        assert held(items) == expected
        for writer in writers:
            for tender_id, (date_modified, _) in writer.stats.last.items():
                assert expected[tender_id] >= date_modified
        versions: dict[str, list[str]] = {}
        for item in items:
            versions.setdefault(item["id"], []).append(item["dateModified"])
        for tender_id, seen in versions.items():
            assert seen == sorted(seen), f"{tender_id}: an older version after a newer one"
        saved = json.loads(state.read_text())
        assert saved["backward_done"]
        assert is_position_offset(saved["forward_offset"])

        assert cli_sync(url, state, out) == 0
        assert "Resuming from" in capsys.readouterr().err
        assert held(read_lines(out)) == expected
    finally:
        for writer in writers:
            writer.stop()
        if process is not None and process.poll() is None:
            process.kill()
            process.communicate()
        server.close()


# -- switching the feed order ---------------------------------------------------


def wait_patches(writer: PatchWriter, count: int, timeout: float = 60.0) -> None:
    """Wait until ``writer`` made ``count`` patches."""
    deadline = time.monotonic() + timeout
    while writer.stats.patches < count:
        assert time.monotonic() < deadline, f"the writer made fewer than {count} patches in {timeout} s"
        time.sleep(0.02)


def test_switch_from_watermark_to_commit_order_loses_nothing(
    apps: Callable[[str], Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two crawlers sync part of a watermark-ordered feed: one stopped in
    the middle of its history crawl, one caught up by ``sync`` while a
    writer patches tenders, so that the latest patches are still younger
    than W (some made before the sequencer started, so backfilled, some
    after it started, so stamped by their commits). The deployment then switches to the commit order
    (the second app's sequencer started first, as the docs say) and more
    writes follow. Both crawlers continue from their saved watermark
    offsets and end with the latest version of every tender; they now
    hold position offsets."""
    watermark_app = apps("watermark")
    deployment = Deployment(watermark_app)
    try:
        api = deployment.api_url
        url = api + "/tenders"
        http = requests.Session()
        ids = create_tenders(api, 60, seed=22, session=http)
        time.sleep(SWITCH_W + 0.15)

        partial = Collector()
        partial_state = tmp_path / "partial.json"
        with FeedSync(url, crash_after(partial, 2, "backward"), partial_state, limit=10) as sync:
            with pytest.raises(Crash):
                sync.run()
        saved = json.loads(partial_state.read_text())
        assert not saved["backward_done"] and not is_position_offset(saved["forward_offset"])

        state, out = tmp_path / "state.json", tmp_path / "items.jsonl"
        patch(api, ids[:10], "long before the switch", http)
        time.sleep(SWITCH_W + 0.15)
        # Patches flow while the sequencer starts (those before its start
        # are backfilled, the later ones stamped by their commits) and while
        # the crawler catches up: its offset ends a moment before the
        # patches the watermark still hides, often in the same second.
        writer = PatchWriter(api, ids[10:40], rate=40, seed=22, name="switch-writer")
        writer.start()
        try:
            wait_patches(writer, 3)
            commit_app = apps("commit")  # its sequencer backfills, then publishes
            wait_patches(writer, writer.stats.patches + 3)
            assert cli_sync(url, state, out) == 0
        finally:
            writer.stop()
            writer.join(timeout=10)
        assert writer.stats.patches > 3 and writer.stats.errors == 0
        before = json.loads(state.read_text())
        assert before["backward_done"] and not is_position_offset(before["forward_offset"])
        store = watermark_app.registry.feed_store
        unseen = {key for key, value in database_state(store).items() if held(read_lines(out)).get(key) != value}
        assert unseen, "the last patches were still hidden by the watermark"
        assert not unseen & set(ids[:10])

        deployment.switch(commit_app)
        ids += create_tenders(api, 5, seed=23, session=http)
        patch(api, ids[40:50] + ids[-5:], "after the switch", http)
        wait_sequenced(store)
        expected = database_state(store)
        assert len(expected) == 65

        assert cli_sync(url, state, out) == 0
        assert "Resuming from" in capsys.readouterr().err
        assert held(read_lines(out)) == expected
        assert is_position_offset(json.loads(state.read_text())["forward_offset"])

        with FeedSync(url, partial, partial_state, limit=10) as sync:
            stats = sync.run()
        assert stats.restarts == 0 and stats.backward_done
        assert held(partial.items) == expected
        assert is_position_offset(json.loads(partial_state.read_text())["forward_offset"])
    finally:
        deployment.close()


def test_switch_from_commit_to_watermark_order_loses_nothing(
    apps: Callable[[str], Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The reverse switch: crawlers that hold position offsets of a
    commit-ordered feed (one stopped in the middle of its history crawl,
    one caught up by ``sync`` while a writer patches tenders and the
    sequencer stops, so the last patches are beyond the checkpoint) continue on a watermark-ordered app
    on the same database and end with the latest version of every tender;
    they now hold watermark offsets."""
    commit_app = apps("commit")
    deployment = Deployment(commit_app)
    try:
        api = deployment.api_url
        url = api + "/tenders"
        http = requests.Session()
        store = commit_app.registry.feed_store
        ids = create_tenders(api, 60, seed=24, session=http)
        wait_sequenced(store)

        partial = Collector()
        partial_state = tmp_path / "partial.json"
        with FeedSync(url, crash_after(partial, 2, "backward"), partial_state, limit=10) as sync:
            with pytest.raises(Crash):
                sync.run()
        saved = json.loads(partial_state.read_text())
        assert not saved["backward_done"] and is_position_offset(saved["forward_offset"])
        assert is_position_offset(saved["backward_offset"])

        state, out = tmp_path / "state.json", tmp_path / "items.jsonl"
        patch(api, ids[:10], "before the switch", http)
        wait_sequenced(store)
        assert cli_sync(url, state, out) == 0
        assert held(read_lines(out)) == database_state(store)
        # Patches flow while the sequencer stops (the feed stops moving at
        # its last checkpoint) and while the crawler catches up: its offset
        # ends a moment before the patches the checkpoint does not cover.
        writer = PatchWriter(api, ids[10:40], rate=40, seed=24, name="switch-writer")
        writer.start()
        try:
            wait_patches(writer, 3)
            commit_app.registry.feed_sequencer.stop()
            wait_patches(writer, writer.stats.patches + 3)
            assert cli_sync(url, state, out) == 0
        finally:
            writer.stop()
            writer.join(timeout=10)
        assert writer.stats.patches > 3 and writer.stats.errors == 0
        before = json.loads(state.read_text())
        assert before["backward_done"] and is_position_offset(before["forward_offset"])
        unseen = {key for key, value in database_state(store).items() if held(read_lines(out)).get(key) != value}
        assert unseen and unseen <= set(ids[10:40]), "the last patches were behind the checkpoint"

        watermark_app = apps("watermark")
        deployment.switch(watermark_app)
        ids += create_tenders(api, 5, seed=25, session=http)
        patch(api, ids[40:50] + ids[-5:], "after the switch", http)
        time.sleep(SWITCH_W + 0.15)
        expected = database_state(store)
        assert len(expected) == 65

        assert cli_sync(url, state, out) == 0
        assert "Resuming from" in capsys.readouterr().err
        assert held(read_lines(out)) == expected
        assert not is_position_offset(json.loads(state.read_text())["forward_offset"])

        with FeedSync(url, partial, partial_state, limit=10) as sync:
            stats = sync.run()
        assert stats.restarts == 0 and stats.backward_done
        assert held(partial.items) == expected
        assert not is_position_offset(json.loads(partial_state.read_text())["forward_offset"])
    finally:
        deployment.close()
