"""What the reconcile endpoint costs the database (issue 37, server side).

``python -m benchmarks reconcile``: two parts, each a function of its own
(the client's "k differences" table lives in :mod:`.reconcile_client`).

* :func:`in_sync`: a feed of ``tenders`` tenders (10,000 and 100,000)
  created in a burst (inserted straight into the database as the API
  stores them, 1,000 a second of ``dateModified``), the demo app in process
  with its follower building the aggregates, then an in-sync check: a
  crawler holding exactly the feed's records sends its first message. It
  must be done in **one** round trip. The web's client is monitored
  (pymongo command monitoring): every command of the ``GET`` and of the
  round, and every document of their replies, are counted; each command of
  the round is explained (``executionStats``: the index keys, the keys and
  documents examined); the database process's CPU of the round is printed
  beside that of 10 feed pages (``limit=100``). The same check without the
  aggregates (``feed.reconcile_aggregates = false``: the records computed
  from the feed) shows what a host without a follower pays.
* :func:`keeper_cost`: the seed's load of ``python -m benchmarks orders``
  (6 writers, 80 patches/s asked, writes held 5-40 ms, one crawler) with
  the follower in process, in each order, with the aggregates on and off,
  alternating (ABBA); the database process's CPU per patch of each and the
  ratio on / off (the issue's ceiling: 1.25).
"""

from __future__ import annotations

import json
import random
import statistics
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from pymongo import MongoClient, monitoring

from openprocurement_feed.embedded.server import EmbeddedServer

from .common import insert_public_tenders, status, table

#: Feed sizes of the in-sync check.
SIZES = (10_000, 100_000)
#: The burst's pace: one tender per millisecond of ``dateModified``.
BURST_SPACING_US = 1000
#: The issue's ceilings: documents returned at 10,000 tenders; at 100,000
#: less than twice the 10,000 figure; the keeper's CPU per patch.
DOCUMENTS_CEILING = 2000
KEEPER_CEILING = 1.25
FEED_PAGES = 10
PATH = "/api/2.5/feeds/tenders/reconcile"


class Monitor(monitoring.CommandListener):
    """The commands of one client and the documents of their replies."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.commands: list[dict[str, Any]] = []
        self.documents = 0
        self.enabled = True

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if self.enabled:
            with self.lock:
                self.commands.append({"name": event.command_name, "command": dict(event.command)})

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        cursor = event.reply.get("cursor") if isinstance(event.reply, dict) else None
        if self.enabled and isinstance(cursor, dict):
            with self.lock:
                self.documents += len(cursor.get("firstBatch") or cursor.get("nextBatch") or ())

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass

    def take(self) -> tuple[list[dict[str, Any]], int]:
        with self.lock:
            taken = (self.commands, self.documents)
            self.commands, self.documents = [], 0
        return taken


def seed_burst(collection: Any, count: int, seed: int = 1) -> dict[str, str]:
    """Insert ``count`` public tenders shaped as the API stores them, their
    ``dateModified`` one :data:`BURST_SPACING_US` apart ending a minute ago;
    their id → ``dateModified``."""
    rng = random.Random(seed)  # nosec B311 - sample documents
    start = datetime.now(timezone.utc) - timedelta(seconds=60 + count * BURST_SPACING_US / 1e6)
    moments = (
        start + timedelta(microseconds=number * BURST_SPACING_US + rng.randint(0, BURST_SPACING_US - 1))
        for number in range(count)
    )
    return insert_public_tenders(collection, moments, rng)


@dataclass
class CheckRow:
    """One in-sync check."""

    tenders: int
    source: str
    build_seconds: float
    rounds: int
    get_commands: int
    get_documents: int
    round_commands: int
    round_documents: int
    round_cpu_ms: float
    pages_cpu_ms: float
    plans: list[str] = field(default_factory=list)


@contextmanager
def served(database: EmbeddedServer, name: str, aggregates: bool) -> Iterator[tuple[Any, Monitor, Any]]:
    """The demo app (watermark order, its follower in process) on database
    ``name``, as a TestApp whose web client is monitored."""
    from webtest import TestApp

    from openprocurement_feed import shutdown
    from openprocurement_feed.demo import main
    from openprocurement_feed.store.database import FeedStore
    from openprocurement_feed.store.state import feed_state

    settings = {
        "mongodb.uri": database.uri,
        "mongodb.db_name": name,
        "feed.watermark_seconds": "1",
        "feed.sequencer": "observe",
        "feed.reconcile_aggregates": "true" if aggregates else "false",
    }
    app = main({}, **settings)
    registry = app.registry
    original = registry.feed_store
    monitor = Monitor()
    client: MongoClient[Any] = MongoClient(database.uri, event_listeners=[monitor], tz_aware=True)
    feed_state(registry).store = FeedStore(client, name, watermark_seconds=1.0)
    try:
        yield TestApp(app), monitor, client
    finally:
        feed_state(registry).store = original
        shutdown(registry)
        client.close()


def wait_built(test: Any, count: int, aggregates: bool, timeout: float = 3600.0) -> float:
    """Wait until the endpoint answers for ``count`` records; the seconds it took."""
    started = time.monotonic()
    last = 0.0
    while True:
        response = test.get(PATH, status="*")
        wanted = "aggregates" if aggregates else "feed"
        if response.status_int == 200 and response.json["records"] == count and response.json["source"] == wanted:
            return time.monotonic() - started
        if time.monotonic() - started > timeout:
            raise RuntimeError(f"the endpoint did not answer for {count} records in {timeout:.0f} s: {response.text}")
        if time.monotonic() - last > 30:
            last = time.monotonic()
            status(f"reconcile: waiting for the aggregates ({response.status_int}, {time.monotonic() - started:.0f} s)")
        time.sleep(1.0)


def plan_lines(client: MongoClient[Any], name: str, commands: Sequence[dict[str, Any]]) -> list[str]:
    """The aggregates and finds of ``commands`` explained (``executionStats``),
    summed per kind of read: how many, the index keys the plan walks, the
    keys and documents the server examined (the documents it returned to
    the endpoint are counted apart: a ``$group`` returns one)."""
    kinds: dict[str, list[Any]] = {}
    for recorded in commands:
        if recorded["name"] not in ("aggregate", "find"):
            continue
        command = {
            key: value
            for key, value in recorded["command"].items()
            if not key.startswith("$")
            and key not in ("lsid", "txnNumber", "autocommit", "startTransaction", "readConcern")
        }
        explained = client[name].command("explain", command, verbosity="executionStats")
        stats = explained.get("executionStats") or {}
        planner = explained.get("queryPlanner") or {}
        for stage in explained.get("stages") or ():
            cursor = stage.get("$cursor") if isinstance(stage, dict) else None
            if isinstance(cursor, dict):
                stats = cursor.get("executionStats") or stats
                planner = cursor.get("queryPlanner") or planner
        plan = planner.get("winningPlan") or {}
        keys = plan.get("keyPattern") or (plan.get("inputStage") or {}).get("keyPattern")
        match = command.get("filter") or next(
            (stage["$match"] for stage in command.get("pipeline", ()) if "$match" in stage), None
        )
        if not match:
            kind = "the state and the database's time ($documents, $unionWith)"
        else:
            level = match.get("lv")
            what = "records" if level == 0 else f"buckets, level {level}"
            shape = "sum ($group)" if command.get("pipeline") and len(command["pipeline"]) > 1 else "rows"
            kind = f"{what}, {shape}"
        entry = kinds.setdefault(kind, [0, set(), 0, 0])
        entry[0] += 1
        entry[1].add(f"{plan.get('stage', '?')} {json.dumps(keys) if keys else ''}".strip())
        entry[2] += int(stats.get("totalKeysExamined") or 0)
        entry[3] += int(stats.get("totalDocsExamined") or 0)
    return table(
        ["read", "commands", "plan, index keys", "keys examined", "docs examined"],
        [[kind, count, ", ".join(sorted(plans)), keys, docs] for kind, (count, plans, keys, docs) in kinds.items()],
    ).splitlines()


def check(database: EmbeddedServer, tenders: int, aggregates: bool = True) -> CheckRow:
    """Seed ``tenders`` in a burst and make one in-sync check."""
    from openprocurement_feed.reconcile.negentropy import Negentropy
    from openprocurement_feed.reconcile.records import record
    from openprocurement_feed.reconcile.storage import VectorStorage

    name = f"bench_reconcile_{tenders}_{'agg' if aggregates else 'feed'}"
    seeding: MongoClient[Any] = MongoClient(database.uri)
    seeding.drop_database(name)
    started = time.monotonic()
    versions = seed_burst(seeding[name]["tenders"], tenders)
    status(f"reconcile: {tenders} tenders inserted in {time.monotonic() - started:.0f} s")
    try:
        with served(database, name, aggregates) as (test, monitor, client):
            build = wait_built(test, tenders, aggregates)
            status(f"reconcile: the endpoint answers for {tenders} records after {build:.0f} s")
            monitor.take()
            horizon = test.get(PATH).json
            get_commands, get_documents = monitor.take()
            until = horizon["until"]
            items = [record(key, stamp) for key, stamp in versions.items()]
            copy = VectorStorage.of(item for item in items if item.timestamp < until)
            negentropy = Negentropy(copy, frame_size_limit=horizon["frame_size_limit"])
            message = negentropy.initiate()
            cpu = database.cpu_seconds() or 0.0
            answer = test.post(
                f"{PATH}?until={until}", message, headers={"Content-Type": "application/octet-stream"}
            ).body
            round_cpu = (database.cpu_seconds() or 0.0) - cpu
            commands, documents = monitor.take()
            following, have, need = negentropy.reconcile_initiator(answer)
            rounds = 1 if following is None and not have and not need else 2
            monitor.enabled = False
            plans = plan_lines(client, name, commands) if aggregates else []
            path = "/api/2.5/tenders?limit=100"
            cpu = database.cpu_seconds() or 0.0
            for _ in range(FEED_PAGES):
                path = test.get(path).json["next_page"]["path"]
            pages_cpu = (database.cpu_seconds() or 0.0) - cpu
        return CheckRow(
            tenders,
            "aggregates" if aggregates else "the feed",
            build,
            rounds,
            len(get_commands),
            get_documents,
            len(commands),
            documents,
            round_cpu * 1000,
            pages_cpu * 1000,
            plans,
        )
    finally:
        seeding.drop_database(name)
        seeding.close()


def in_sync(sizes: Sequence[int] = SIZES, fallback: bool = True) -> list[CheckRow]:
    """The in-sync check at each size (and without the aggregates)."""
    rows = []
    with EmbeddedServer() as database:
        for tenders in sizes:
            rows.append(check(database, tenders))
            if fallback:
                rows.append(check(database, tenders, aggregates=False))
    return rows


def in_sync_report(rows: Sequence[CheckRow]) -> str:
    """The in-sync table and the explained commands."""
    body = table(
        [
            "tenders",
            "records from",
            "ready after (s)",
            "round trips",
            "GET cmds / docs",
            "round cmds / docs",
            "round db CPU ms",
            f"{FEED_PAGES} feed pages db CPU ms",
        ],
        [
            [
                f"{row.tenders:,}",
                row.source,
                f"{row.build_seconds:.0f}",
                row.rounds,
                f"{row.get_commands} / {row.get_documents}",
                f"{row.round_commands} / {row.round_documents}",
                f"{row.round_cpu_ms:.0f}",
                f"{row.pages_cpu_ms:.0f}",
            ]
            for row in rows
        ],
    )
    text = (
        "An in-sync check (watermark order, the follower in process; the round is the client's first "
        "message, answered with one Skip):\n" + body + "\n"
        "cmds / docs = the database commands the endpoint sent and the documents their replies held; "
        "ready after = from the app's start until the endpoint answered for every record (the "
        "keeper's build from the documents)."
    )
    with_aggregates = [row for row in rows if row.source == "aggregates"]
    if with_aggregates:
        smallest = min(with_aggregates, key=lambda row: row.tenders)
        verdicts = [
            f"{smallest.tenders:,}: {smallest.round_documents + smallest.get_documents} documents "
            f"(ceiling {DOCUMENTS_CEILING})"
        ]
        for row in with_aggregates:
            if row is not smallest:
                verdicts.append(
                    f"{row.tenders:,}: {row.round_documents + row.get_documents} documents (ceiling < "
                    f"{2 * (smallest.round_documents + smallest.get_documents)})"
                )
        text += "\nDocuments returned for the check (GET and round): " + "; ".join(verdicts)
        for row in with_aggregates:
            text += f"\n\nThe round's commands at {row.tenders:,} tenders, explained:\n" + "\n".join(row.plans)
    return text


# -- the keeper's cost ---------------------------------------------------------------------


def keeper_cost(seconds: float = 20.0, rounds: int = 3) -> dict[tuple[str, bool], list[float]]:
    """Database CPU per patch under the seed's load, per order, aggregates on and off (ABBA)."""
    from openprocurement_feed.race.config import RaceConfig
    from openprocurement_feed.race.experiment import run_once

    from .orders import LOAD, WATERMARK

    found: dict[tuple[str, bool], list[float]] = {}
    with EmbeddedServer() as database:
        pid = database.process.pid if database.process is not None else None
        # a first run is slower whatever it runs (the server's and the
        # app's first imports and caches): one, not counted
        warm = RaceConfig(
            duration=min(seconds, 10.0),
            watermarks=(WATERMARK,),
            sequencer="thread",
            mongodb_uri=database.uri,
            database_pid=pid,
            settings=(("feed.sequencer", "observe"),),
            **LOAD,  # type: ignore[arg-type]
        )
        status("reconcile: keeper cost, a warm-up run (not counted)")
        run_once(warm, WATERMARK, status, order="watermark")
        for number in range(rounds):
            for order in ("watermark", "commit"):
                sequence = (True, False) if number % 2 == 0 else (False, True)
                for aggregates in sequence:
                    settings: tuple[tuple[str, str], ...] = (
                        ("feed.reconcile_aggregates", "true" if aggregates else "false"),
                    )
                    if order == "watermark":
                        settings += (("feed.sequencer", "observe"),)
                    config = RaceConfig(
                        duration=seconds,
                        watermarks=(WATERMARK,),
                        sequencer="thread",
                        mongodb_uri=database.uri,
                        database_pid=pid,
                        settings=settings,
                        **LOAD,  # type: ignore[arg-type]
                    )
                    label = f"{order}, aggregates {'on' if aggregates else 'off'}"
                    status(f"reconcile: keeper cost, round {number + 1}, {label}")
                    result = run_once(config, WATERMARK if order == "watermark" else 0.0, status, order=order)
                    if result.database_cpu_ms_per_patch is not None:
                        found.setdefault((order, aggregates), []).append(result.database_cpu_ms_per_patch)
    return found


def keeper_report(found: dict[tuple[str, bool], list[float]], seconds: float) -> str:
    rows = []
    for order in ("watermark", "commit"):
        on, off = found.get((order, True), []), found.get((order, False), [])
        median_on = statistics.median(on) if on else None
        median_off = statistics.median(off) if off else None
        ratio = f"{median_on / median_off:.2f}" if median_on and median_off else "-"
        rows.append(
            [
                order,
                " ".join(f"{value:.2f}" for value in off) or "-",
                " ".join(f"{value:.2f}" for value in on) or "-",
                ratio,
            ]
        )
    return (
        f"The keeper's cost: the seed's load ({seconds:g} s per run, the follower in process), the database "
        "process's CPU per acknowledged patch (ms), aggregates off and on, alternating:\n"
        + table(["order", "off (runs)", "on (runs)", "on / off (medians)"], rows)
        + f"\nceiling: {KEEPER_CEILING:.2f}"
    )


def run(sizes: Sequence[int] = SIZES, seconds: float = 20.0, rounds: int = 3, keeper: bool = True) -> None:
    """Print both parts."""
    print(in_sync_report(in_sync(sizes)), flush=True)
    if keeper:
        print()
        print(keeper_report(keeper_cost(seconds, rounds), seconds), flush=True)
