"""What one order of a built feed costs: a page, a full crawl, an in-sync
check, ``verify`` of a copy of every object, the sequencer's rematerialize.

* A page: :mod:`.paging`.
* The full crawl is the reference crawler (:mod:`.crawler`) in a process of
  its own, from an empty state to the end of the history.
* The in-sync check is a crawler holding exactly the feed's records sending
  its first message to the reconcile endpoint of the demo app run in this
  process, its database client monitored (``benchmarks reconcile``'s way).
* ``verify`` is the command, ``openprocurement-feed verify URL --items FILE``,
  in a process of its own (its peak RSS from ``wait4``).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from openprocurement_feed.store.database import FeedStore
from openprocurement_feed.store.orders import positions_name

from ..reconcile import Monitor
from . import cli
from .build import DB_NAME, PREFIX, Build, environment, say
from .paging import LIMIT, PageFigure

#: Seconds a crawl or a verify may take.
TIMEOUT = 3600.0


@dataclass
class OrderFigures:
    """Everything measured of one order at one size."""

    size: int
    order: str
    pages: dict[str, PageFigure] = field(default_factory=dict)
    crawl: dict[str, Any] = field(default_factory=dict)
    in_sync: dict[str, Any] = field(default_factory=dict)
    verify: dict[str, Any] = field(default_factory=dict)
    build: dict[str, float] = field(default_factory=dict)
    rematerialize: dict[str, Any] = field(default_factory=dict)
    rss_mb: dict[str, float] = field(default_factory=dict)
    #: when and on which revision of the package it was measured
    measured: str = ""


#: Seconds a full crawl may take before it is stopped (``--crawl-seconds``).
CRAWL_SECONDS = cli.CRAWL_SECONDS


def full_crawl(build: Build, order: str) -> dict[str, Any]:
    """The reference crawler from an empty state to the end of the history
    (or for :data:`CRAWL_SECONDS`: then its figures are those of the pages it
    read, ``stopped`` says so)."""
    command = [sys.executable, "-m", "benchmarks.scale.crawler", build.url(order), str(LIMIT), str(CRAWL_SECONDS)]
    code, out, rss_kb, _, said = run_measured(command)
    if code != 0:
        raise RuntimeError(f"the crawl of {build.url(order)} exited with {code}: {out[-1000:]} {said}")
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    times = result.pop("times")
    tenth = max(1, len(times) // 10)
    # pages per second over the first and the last tenth of the pages
    result["first_tenth_pps"] = tenth / max(times[tenth - 1], 1e-6)
    result["last_tenth_pps"] = tenth / max(times[-1] - times[-tenth - 1], 1e-6) if len(times) > tenth else 0.0
    result["rss_mb"] = rss_kb / 1024
    return result


#: ``python -m MODULE ARGS`` run so that it prints, last on its stderr, its
#: own peak RSS: ``VmHWM`` of its memory after ``exec``. The ``ru_maxrss``
#: of ``wait4`` (and of the child's own ``getrusage``) starts at the peak of
#: the process that spawned it: this benchmark's, hundreds of MB with a
#: million tenders' ids in hand (the crawler seemed to grow to 288 MB; it
#: holds about 94).
PEAK_RSS = (
    "import runpy, sys\n"
    "module = sys.argv[1]\n"
    "sys.argv = sys.argv[1:]\n"
    "try:\n"
    "    runpy.run_module(module, run_name='__main__', alter_sys=True)\n"
    "finally:\n"
    "    with open('/proc/self/status') as status:\n"
    "        peak = [line.split()[1] for line in status if line.startswith('VmHWM:')]\n"
    "    print('peak-rss-kb', peak[0] if peak else 0, file=sys.stderr, flush=True)\n"
)


def run_measured(command: list[str], timeout: float = TIMEOUT) -> tuple[int, str, int, float, str]:
    """Run ``command`` (``python -m MODULE ...``): its status, its stdout,
    its own peak RSS (KB, :data:`PEAK_RSS`), its seconds and the end of its
    stderr (what a failure said)."""
    started = time.monotonic()
    if command[1:2] == ["-m"]:
        command = [command[0], "-c", PEAK_RSS, *command[2:]]
    with tempfile.TemporaryFile() as errors:
        process = subprocess.Popen(  # nosec B603 - our own fixed commands
            command, env=environment(), stdout=subprocess.PIPE, stderr=errors, stdin=subprocess.DEVNULL
        )
        assert process.stdout is not None
        out = process.stdout.read().decode("utf-8", "replace")
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
        process.stdout.close()
        errors.seek(0)
        said = errors.read().decode("utf-8", "replace")
    peaks = [line.split()[1] for line in said.splitlines() if line.startswith("peak-rss-kb ")]
    peak = int(peaks[-1]) if peaks and peaks[-1].isdigit() and int(peaks[-1]) > 0 else int(usage.ru_maxrss)
    return process.returncode, out, peak, time.monotonic() - started, said[-2000:]


def verify(build: Build, order: str) -> dict[str, Any]:
    """``openprocurement-feed verify URL --items FILE`` of the copy of every object."""
    command = [sys.executable, "-m", "openprocurement_feed.cli", "verify", build.url(order)]
    command += ["--items", str(build.items_file), "--json", "--timeout", "1800"]
    code, out, rss_kb, seconds, _ = run_measured(command)
    try:
        body = json.loads(out)
    except ValueError:
        body = {}
    return {
        "exit": code,
        "seconds": seconds,
        "rss_mb": rss_kb / 1024,
        "rounds": body.get("rounds"),
        "in_sync": code == 0,
    }


@contextlib.contextmanager
def monitored_app(build: Build, order: str) -> Iterator[tuple[Any, Monitor]]:
    """The demo app of ``order`` in this process (no follower), its store's
    client monitored, as a TestApp."""
    from webtest import TestApp

    from openprocurement_feed import shutdown
    from openprocurement_feed.demo import main
    from openprocurement_feed.store.state import feed_state

    settings = {
        "mongodb.uri": build.database.uri,
        "mongodb.db_name": DB_NAME,
        "feed.route_prefix": PREFIX,
        "feed.order": order,
        "feed.sequencer": "off",
        "feed.watermark_seconds": "1",
        "feed.reconcile_aggregates": "true",
        "demo.auth_file": "",
    }
    app = main({}, **settings)
    registry = app.registry
    # the store the views read (assigning registry.feed_store once the app
    # is made changes nothing: it is an alias of the state's field)
    state = feed_state(registry)
    original = state.store
    monitor = Monitor()
    client = build.client(event_listeners=[monitor])
    state.store = FeedStore(client, DB_NAME, watermark_seconds=1.0)
    try:
        yield TestApp(app), monitor
    finally:
        state.store = original
        shutdown(registry)
        client.close()


def in_sync(build: Build, order: str) -> dict[str, Any]:
    """A crawler holding exactly the feed's records sends its first message:
    rounds, the documents the database returned (horizon and round), time."""
    from openprocurement_feed.reconcile.negentropy import Negentropy
    from openprocurement_feed.reconcile.records import record
    from openprocurement_feed.reconcile.storage import VectorStorage

    path = f"{PREFIX}/feeds/tenders/reconcile"
    with monitored_app(build, order) as (test, monitor):
        monitor.take()
        started = time.perf_counter()
        cpu = build.database.cpu_seconds() or 0.0
        horizon = test.get(path).json
        get_commands, get_documents = monitor.take()
        if horizon.get("source") != "aggregates" or horizon.get("records") != build.size:
            say(
                f"{order}: the reconcile endpoint answers {horizon.get('records')} records from {horizon.get('source')}"
            )
        until = horizon["until"]
        copy = VectorStorage.of(
            item
            for item in (record(key, stamp) for key, stamp in zip(build.ids, build.stamps, strict=True))
            if item.timestamp < until
        )
        negentropy = Negentropy(copy, frame_size_limit=horizon["frame_size_limit"])
        message = negentropy.initiate()
        answer = test.post(f"{path}?until={until}", message, headers={"Content-Type": "application/octet-stream"}).body
        commands, documents = monitor.take()
        following, have, need = negentropy.reconcile_initiator(answer)
        rounds = 1
        while following is not None:  # not in sync in one round: go on, counting
            rounds += 1
            answer = test.post(
                f"{path}?until={until}", following, headers={"Content-Type": "application/octet-stream"}
            ).body
            more, extra_documents = monitor.take()
            commands += more
            documents += extra_documents
            following, more_have, more_need = negentropy.reconcile_initiator(answer)
            have += more_have
            need += more_need
        used = (build.database.cpu_seconds() or 0.0) - cpu
        seconds = time.perf_counter() - started
    return {
        "rounds": rounds,
        "documents": get_documents + documents,
        "commands": len(get_commands) + len(commands),
        "seconds": seconds,
        "db_cpu_ms": used * 1000,
        "differences": len(have) + len(need),
        "source": horizon.get("source"),
    }


def rematerialize(build: Build) -> dict[str, Any]:
    """Two fields added to the commit-ordered feed: the sequencer's
    re-materialization of every entry (``benchmarks sequencer``'s way)."""
    from openprocurement_feed.commit.sequencer import CollectionSequencer
    from openprocurement_feed.store.listing import STATE_LISTING
    from openprocurement_feed.store.orders import STATE_ID

    client = build.client()
    try:
        db = client[DB_NAME]
        state = db[positions_name("tenders")].find_one({"_id": STATE_ID}) or {}
        listing = tuple(state.get(STATE_LISTING) or ("dateModified", "public_modified"))
        added = tuple(
            name
            for name in ("title", "status", "value", "owner", "tenderID", "dateCreated", "_rev")
            if name not in listing
        )[:2]
        follower = CollectionSequencer(db["tenders"], listing=(*listing, *added), lag_window_seconds=60.0)
        cpu = build.database.cpu_seconds() or 0.0
        started = time.perf_counter()
        follower.check_listing(follower.load_state())
        assert follower.rematerializer is not None
        follower.rematerializer.join()
        seconds = time.perf_counter() - started
        used = (build.database.cpu_seconds() or 0.0) - cpu
        return {"seconds": seconds, "entries": follower.stats.rematerialized, "db_cpu_s": used, "fields": list(added)}
    finally:
        client.close()
