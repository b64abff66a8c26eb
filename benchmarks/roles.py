"""What a client per role costs: connections and the database's CPU per change.

``python -m benchmarks roles`` runs the demo in commit order with a
sequencer on one embedded server, twice per round: the sequencer on a
client of its own (``openprocurement-feed-sequencer``, as the include
starts it) and on the web store's client (as before the roles had names),
in alternating order. Each run creates 20 tenders, answers one long-poll
request (so the notifier's client connects), then PATCHes them
``--patches`` times and waits until the sequencer has followed every
change. It prints the server's connections by ``appName`` (``currentOp``
with idle connections) and its CPU per patch (its CPU time over the
patches, read from ``/proc``), then the medians.
"""

from __future__ import annotations

import statistics
import time
import uuid
from typing import Any

from pymongo import MongoClient

from openprocurement_feed import commit_collections, commit_listings, shutdown
from openprocurement_feed.commit.sequencer import Sequencer
from openprocurement_feed.embedded.server import EmbeddedServer
from openprocurement_feed.roles import SEQUENCER
from openprocurement_feed.store.state import role_store
from openprocurement_feed.testing import make_settings

from .common import table

TENDERS = 20
#: The name of the benchmark's own client.
OBSERVER = "benchmark-roles"


def connections(client: MongoClient[Any]) -> dict[str, int]:
    """The server's connections by the ``appName`` of their handshake."""
    found: dict[str, int] = {}
    for op in client.admin.command({"currentOp": 1, "$all": True})["inprog"]:
        name = ((op.get("clientMetadata") or {}).get("application") or {}).get("name") or "(none)"
        found[name] = found.get(name, 0) + 1
    return found


def measure(server: EmbeddedServer, observer: MongoClient[Any], own: bool, patches: int) -> dict[str, Any]:
    """One run: CPU ms per patch, patches/s, the connections by name."""
    from webtest import TestApp

    from openprocurement_feed.demo import main

    name = f"roles_{uuid.uuid4().hex[:8]}"
    app = main({}, **make_settings(server.uri, name, feed_order="commit", feed_sequencer="off"))
    registry = app.registry
    database = role_store(registry, SEQUENCER).db if own else registry.feed_store.db
    sequencer = Sequencer(database, commit_collections(registry), listings=commit_listings(registry)).start()
    try:
        if not sequencer.wait_ready(30):
            raise RuntimeError("the sequencer did not start")
        web = TestApp(app)
        ids = [
            web.post_json("/api/2.5/tenders", {"data": {"title": f"t{n}"}}).json["data"]["id"] for n in range(TENDERS)
        ]
        offset = web.get("/api/2.5/tenders").json["next_page"]["offset"]
        web.get(f"/api/2.5/tenders?feed=longpoll&timeout=0.5&offset={offset}", status="*")
        counted = connections(observer)
        (follower,) = [each for each in sequencer.followers if each.name == "tenders"]
        before, cpu_before, started = follower.stats.events, server.cpu_seconds() or 0.0, time.monotonic()
        for number in range(patches):
            web.patch_json(f"/api/2.5/tenders/{ids[number % TENDERS]}", {"data": {"description": str(number)}})
        deadline = time.monotonic() + 60
        while follower.stats.events < before + patches and time.monotonic() < deadline:
            time.sleep(0.02)
        cpu = (server.cpu_seconds() or 0.0) - cpu_before
        seconds = time.monotonic() - started
    finally:
        sequencer.stop()
        shutdown(registry)
        observer.drop_database(name)
    return {"ms": cpu * 1000 / patches, "rate": patches / seconds, "connections": counted}


def run(patches: int = 300, rounds: int = 4) -> None:
    """Print each run and the medians."""
    results: dict[bool, list[float]] = {True: [], False: []}
    rows = []
    with EmbeddedServer() as server:
        observer: MongoClient[Any] = MongoClient(server.uri, appname=OBSERVER)
        try:
            for number in range(rounds):
                for own in (True, False) if number % 2 == 0 else (False, True):
                    found = measure(server, observer, own, patches)
                    results[own].append(found["ms"])
                    names = ", ".join(f"{key} {value}" for key, value in sorted(found["connections"].items()))
                    label = "own client" if own else "store's client"
                    rows.append([str(number), label, f"{found['ms']:.2f}", f"{found['rate']:.0f}", names])
                    print(f"round {number}, sequencer on its {label}: done", flush=True)
        finally:
            observer.close()
    print(table(["round", "sequencer on", "DB CPU ms/patch", "patches/s", "connections by appName"], rows))
    for own in (True, False):
        label = "own client" if own else "store's client"
        print(f"median, sequencer on its {label}: {statistics.median(results[own]):.2f} ms of DB CPU per patch")
