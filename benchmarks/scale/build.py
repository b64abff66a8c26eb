"""A feed of ``size`` tenders on a fresh embedded server, served in both
orders by the demo (``pserve``, its own process) with a sequencer process
beside it (``openprocurement-feed sequence``), as a deployment runs them.

The tenders are inserted straight into the database in batches
(``insert_many``), stamped as the store stamps a write (``dateModified``,
``public_modified``; one every :data:`SPACING_SECONDS` of the past, ending an
hour ago), half of them small (one item), half with ten items and long
descriptions (the demo's :func:`~openprocurement_feed.demo.load.sample_tender`).
The sequencer starts once they are all in: on its first start it backfills a
position for every public document (the commit order), then its keeper builds
the reconcile aggregates from the documents (SPEC G.3); the build's times
are measured from its start.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import IO, Any

import requests
from pymongo import MongoClient

from openprocurement_feed.demo.load import sample_tender
from openprocurement_feed.embedded.server import EmbeddedServer, free_port
from openprocurement_feed.settings import parse_settings
from openprocurement_feed.store.buckets import reconcile_name
from openprocurement_feed.store.keeper_state import KeeperState
from openprocurement_feed.store.listing import STATE_SEQ
from openprocurement_feed.store.orders import STATE_ID, positions_name

from ..soak.probes import descendants, rss_bytes
from .visible import VisibleProbe

DB_NAME = "scale"
#: The orders, each served by a web process of its own.
ORDERS = ("watermark", "commit")
PREFIX = "/api/2.5"
#: Seconds of ``public_modified`` between two tenders (a million: a year).
SPACING_SECONDS = 30.0
#: Tenders per ``insert_many``: the package's embedded server (a 64M cache)
#: stops answering for good in the first ``insert_many`` of 1,000 of them.
BATCH = 100
#: The embedded server's cache, when not the package's (``--scale-cache-size``).
CACHE_SIZE: str | None = None
#: Seconds the build may take before the run gives up.
BUILD_TIMEOUT = 6 * 3600.0

INI = """\
[app:main]
use = egg:openprocurement_feed#demo
mongodb.uri = {uri}
mongodb.db_name = {db}
feed.route_prefix = {prefix}
feed.order = {order}
feed.sequencer = off
feed.watermark_seconds = 1
feed.reconcile_aggregates = true
demo.auth_file =

[server:main]
use = egg:waitress#main
listen = 127.0.0.1:{port}
threads = 8
"""


def progress(total: int, desc: str) -> Any:
    """A tqdm counter on stderr."""
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="doc", unit_scale=True, file=sys.stderr, mininterval=2.0)


def say(message: str) -> None:
    print(f"scale: {message}", file=sys.stderr, flush=True)


@dataclass
class Child:
    """A process of the shape and its log."""

    name: str
    process: subprocess.Popen[bytes]
    log: IO[bytes]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()


@dataclass
class Build:
    """A built feed: what was inserted and how long each step took."""

    size: int
    folder: Path
    database: EmbeddedServer
    #: the web process's root URL, per order
    bases: dict[str, str] = field(default_factory=dict)
    #: the tenders' ids in feed order (``public_modified`` ascending, no ties)
    ids: list[str] = field(default_factory=list)
    #: their ``dateModified``, in the same order
    stamps: list[str] = field(default_factory=list)
    #: the stamps as ``public_modified``, in the same order
    values: list[float] = field(default_factory=list)
    items_file: Path = Path()
    children: dict[str, Child] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)

    def api(self, order: str) -> str:
        return self.bases[order] + PREFIX

    def url(self, order: str) -> str:
        """The tenders feed in ``order``."""
        return f"{self.api(order)}/tenders"

    def client(self, **options: Any) -> MongoClient[Any]:
        return MongoClient(self.database.uri, tz_aware=True, **options)

    def versions(self) -> dict[str, str]:
        return dict(zip(self.ids, self.stamps, strict=True))

    def pids(self) -> dict[str, int]:
        """The shape's processes by role: the database server (the deepest
        process under its guard), the web and the sequencer."""
        found: dict[str, int] = {}
        process = self.database.process
        if process is not None:
            tree = descendants(process.pid)
            found["server"] = tree[-1] if tree else process.pid
        for name, child in self.children.items():
            found[name] = child.process.pid
        return found

    def rss_mb(self) -> dict[str, float]:
        return {role: (rss_bytes(pid) or 0) / 2**20 for role, pid in self.pids().items()}

    def pause(self) -> list[Child]:
        """Stop (SIGSTOP) the web and sequencer processes: the server then
        serves only this process's reads. :meth:`resume` goes on."""
        paused = [child for child in self.children.values() if child.process.poll() is None]
        for child in paused:
            child.process.send_signal(signal.SIGSTOP)
        return paused

    def resume(self, paused: list[Child]) -> None:
        for child in paused:
            with contextlib.suppress(ProcessLookupError):
                child.process.send_signal(signal.SIGCONT)

    def require_running(self) -> None:
        for child in self.children.values():
            if child.process.poll() is not None:
                log = (self.folder / f"{child.name.replace(' ', '-')}.log").read_text(errors="replace")[-3000:]
                raise RuntimeError(f"{child.name} exited with status {child.process.returncode}:\n{log}")


def environment() -> dict[str, str]:
    """This environment without the settings' variables (the ini decides)."""
    root = str(Path(__file__).resolve().parents[2])
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("FEED_", "MONGODB_", "DEMO_", "PROMETHEUS_"))}
    environ["PYTHONPATH"] = os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH", "")]))
    environ["PYTHONUNBUFFERED"] = "1"
    return environ


def spawn(build: Build, name: str, command: list[str]) -> Child:
    log = open(build.folder / f"{name.replace(' ', '-')}.log", "ab")  # noqa: SIM115 - closed by Child.stop
    process = subprocess.Popen(  # nosec B603 - our own fixed commands
        command, env=environment(), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
    )
    child = Child(name, process, log)
    build.children[name] = child
    return child


def tenders(size: int, seed: int = 1) -> Iterator[dict[str, Any]]:
    """``size`` public tenders as the API stores them, oldest first."""
    rng = random.Random(seed)  # nosec B311 - sample documents
    start = datetime.now(timezone.utc) - timedelta(seconds=3600 + size * SPACING_SECONDS)
    for number in range(size):
        moment = start + timedelta(seconds=number * SPACING_SECONDS + rng.uniform(0, SPACING_SECONDS / 2))
        stamp = moment.isoformat()
        data = sample_tender(rng, large=number % 2 == 1)
        data.update(
            _id=uuid.UUID(int=rng.getrandbits(128)).hex,
            _rev=f"1-{rng.getrandbits(128):032x}",
            tenderID=f"UA-{moment:%Y-%m-%d}-{number:07d}-a",
            dateCreated=stamp,
            dateModified=stamp,
            status="active.tendering",
            owner="broker",
            public_modified=round(moment.timestamp(), 3),
            is_public=True,
            is_test=False,
        )
        yield data


def insert(build: Build) -> None:
    """Insert the tenders in batches; the copy of every object (id and
    ``dateModified``) is written to :attr:`Build.items_file` beside."""
    client = build.client()
    collection = client[DB_NAME]["tenders"]
    batch: list[dict[str, Any]] = []
    started = time.monotonic()
    with progress(build.size, f"insert {build.size:,}") as bar, build.items_file.open("w", encoding="utf-8") as copy:
        for doc in tenders(build.size):
            batch.append(doc)
            build.ids.append(doc["_id"])
            build.stamps.append(doc["dateModified"])
            build.values.append(doc["public_modified"])
            copy.write(json.dumps({"id": doc["_id"], "dateModified": doc["dateModified"]}) + "\n")
            if len(batch) == BATCH:
                collection.insert_many(batch, ordered=False)
                bar.update(len(batch))
                batch = []
        if batch:
            collection.insert_many(batch, ordered=False)
            bar.update(len(batch))
    build.seconds["insert"] = time.monotonic() - started
    client.close()


def wait_web(build: Build, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    for order in ORDERS:
        while True:
            build.require_running()
            with contextlib.suppress(requests.RequestException):
                # the commit order answers 503 until the sequencer's first checkpoint
                if requests.get(build.url(order) + "?limit=1", timeout=5).status_code in (200, 503):
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"the demo did not answer within {timeout:.0f} s")
            time.sleep(0.5)


def reconcile_records(build: Build) -> tuple[int, str]:
    """The records the commit feed's reconcile endpoint answers for, and from where."""
    with contextlib.suppress(requests.RequestException, ValueError):
        response = requests.get(f"{build.api('commit')}/feeds/tenders/reconcile", timeout=600)
        if response.status_code == 200:
            body = response.json()
            return int(body.get("records") or 0), str(body.get("source"))
    return 0, ""


def wait_sequenced(build: Build, aggregates: bool = True) -> None:
    """From the sequencer's start: until the checkpoint exists (every
    position backfilled), then (``aggregates``) until the reconcile endpoint
    answers for every tender from the aggregates."""
    client = build.client()
    positions = client[DB_NAME][positions_name("tenders")]
    records = client[DB_NAME][reconcile_name("tenders")]
    started = time.monotonic()
    deadline = started + BUILD_TIMEOUT
    probe = VisibleProbe(build.api("commit"))
    try:
        with progress(build.size, "aggregates' records and buckets") as bar:
            while "positions" not in build.seconds or (aggregates and "aggregates" not in build.seconds):
                build.require_running()
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the sequencer did not build the feed in {BUILD_TIMEOUT:.0f} s")
                if "positions" not in build.seconds:
                    # backfilled (a checkpoint), and every entry given its committed_seq
                    state = positions.find_one({"_id": STATE_ID}, {"checkpoint": 1, STATE_SEQ: 1}) or {}
                    if state.get("checkpoint") is not None and state.get(STATE_SEQ) is True:
                        build.seconds["positions"] = time.monotonic() - started
                if aggregates and "aggregates" not in build.seconds:
                    # the keeper's state read by id; the endpoint asked only once
                    # the aggregates are built (before, with no keeper holding
                    # them, each request would read the whole feed)
                    state = KeeperState.from_document(records.find_one({"_id": STATE_ID}))
                    bar.n = records.estimated_document_count()
                    bar.refresh()
                    if state.lease is not None and "keeper" not in build.seconds:
                        # the keeper holds its lease: the build runs (after the
                        # sequencer's backfill and any recovery); the commit
                        # feed's delay meanwhile
                        build.seconds["keeper"] = time.monotonic() - started
                        probe.start()
                    if state.complete is not None:
                        count, source = reconcile_records(build)
                        if count == build.size and source == "aggregates":
                            build.seconds["aggregates"] = time.monotonic() - started
                time.sleep(1.0)
    finally:
        probe.stop()
        client.close()
    build.seconds.update(probe.figures())


@contextlib.contextmanager
def built(size: int, folder: Path, aggregates: bool = True) -> Iterator[Build]:
    """The served feed of ``size`` tenders (its processes stopped after);
    without ``aggregates`` it is served once every position is backfilled,
    the aggregates still building."""
    # the bounds the package gives the embedded server (oplog entries and
    # age, cache: mongodb.embedded_*), as under make run
    flags = parse_settings({"mongodb.uri": "embedded://"}, {}).embedded_args
    if CACHE_SIZE:
        flags = (*flags, "--cache-size", CACHE_SIZE)
    folder.mkdir(parents=True, exist_ok=True)
    database = EmbeddedServer(startup_timeout=60, extra_args=flags)
    build = Build(size, folder, database, items_file=folder / "copy.jsonl")
    database.start()
    try:
        for order in ORDERS:
            port = free_port()
            build.bases[order] = f"http://127.0.0.1:{port}"
            ini = folder / f"scale-{order}.ini"
            text = INI.format(uri=database.uri, db=DB_NAME, prefix=PREFIX, port=port, order=order)
            ini.write_text(text, encoding="utf-8")
            spawn(build, f"web ({order})", [sys.executable, "-m", "pyramid.scripts.pserve", str(ini)])
        wait_web(build)
        insert(build)
        say(f"{size:,} tenders inserted in {build.seconds['insert']:.0f} s; starting the sequencer")
        command = [sys.executable, "-m", "openprocurement_feed.cli", "sequence", "--progress-every", "60"]
        command.append(str(folder / "scale-commit.ini"))
        spawn(build, "sequencer", command)
        wait_sequenced(build, aggregates)
        built_after = f"{build.seconds['aggregates']:.0f} s" if "aggregates" in build.seconds else "(not waited for)"
        say(f"positions backfilled after {build.seconds['positions']:.0f} s, aggregates built after {built_after}")
        yield build
    finally:
        for child in reversed(list(build.children.values())):
            child.stop()
        database.stop()
