"""nostr-tools, as the initiator, against the reconcile endpoint over HTTP.

The NIP-77 ``Negentropy`` of the npm package nostr-tools (pinned in
``tests/interop/package.json``, installed on first use) runs in node
(``tests/interop/nip77_initiator.mjs``) and POSTs each of its messages to the
demo app's ``/api/2.5/feeds/tenders/reconcile?until=...`` on a loopback HTTP
server, in both feed orders, the answers read from the aggregates the
follower keeps.

nostr-tools' varints are 32-bit: it cannot carry the microseconds of today's
``dateModified`` (2**32 µs is 71 minutes after the epoch). The feed's
tenders here are therefore stamped within the first 2**31 µs after the Unix
epoch (1970-01-01T00:00:01.000001+00:00 to 00:35:47), written straight into
the demo's database in the shape its API writes them. The initiator holds the
feed's own records (in sync: one round), fewer (it needs them), more (it has
them), older versions of some (it has the old record, needs the new one) or
another set altogether; its ``have`` and ``need`` are exactly the
differences, and the first 16 bytes of each record id name the object.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import requests
from reconcile_support import serve

from openprocurement_feed.demo.load import sample_tender
from openprocurement_feed.reconcile.records import object_id, record
from openprocurement_feed.store.writes import next_rev
from tests.interop.nostr_tools import run_driver

pytestmark = [pytest.mark.server, pytest.mark.timeout(120)]

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
#: The stamps' range in µs: from just past the first second to below 2**31.
FIRST, LAST = 1_000_001, 2**31 - 1
#: Few enough that a round on the embedded server stays quick (ranges of
#: fewer than 32 records are answered as id lists; the in-sync check compares
#: fingerprints of the aggregates).
TENDERS = 100
Versions = dict[str, str]


def stamp(micros: int) -> str:
    """The ``dateModified`` ``micros`` µs after the epoch, as the API writes it."""
    return (EPOCH + timedelta(microseconds=micros)).isoformat(timespec="microseconds")


def new_versions(rng: random.Random, count: int) -> Versions:
    """``count`` object ids (32 hex digits) with a ``dateModified`` in range."""
    return {uuid.UUID(int=rng.getrandbits(128)).hex: stamp(rng.randint(FIRST, LAST)) for _ in range(count)}


def insert_tenders(collection: Any, versions: Versions, rng: random.Random) -> None:
    """The tenders of ``versions`` as the demo API stores a created one
    (``save_data``'s fields, ``public_modified`` the write's second)."""
    documents = []
    for number, (key, modified) in enumerate(versions.items()):
        data = sample_tender(rng)
        data.pop("mode", None)
        data.update(
            _id=key,
            _rev=next_rev(None),
            tenderID=f"UA-1970-01-01-{number + 1:06d}-a",
            dateCreated=modified,
            dateModified=modified,
            status="active",
            owner="broker",
            public_modified=round(datetime.fromisoformat(modified).timestamp(), 3),
            is_public=True,
            is_test=False,
        )
        documents.append(data)
    collection.insert_many(documents)


def wait_counted(api: str, count: int, timeout: float = 60.0) -> int:
    """Wait until the endpoint counts ``count`` records from its aggregates;
    its ``until``."""
    url = f"{api}/feeds/tenders/reconcile"
    deadline = time.monotonic() + timeout
    answer: Any = None
    while True:
        response = requests.get(url, timeout=10)
        answer = response.json() if response.status_code == 200 else response.status_code
        if isinstance(answer, dict) and answer["records"] == count and answer["source"] == "aggregates":
            return int(answer["until"])
        if time.monotonic() > deadline:
            raise AssertionError(f"the endpoint did not count {count} records within {timeout} s: {answer}")
        time.sleep(0.05)


def items(versions: Versions) -> list[list[Any]]:
    """The records of ``versions`` as the driver takes them: ``[timestamp, id hex]``."""
    return [[item.timestamp, item.id.hex()] for item in (record(key, modified) for key, modified in versions.items())]


def cases(feed: Versions, rng: random.Random) -> dict[str, Versions]:
    """The initiator's copy of the feed, by case name."""
    keys = list(feed)
    missing = set(rng.sample(keys, 40))
    stale = rng.sample([key for key in keys if key not in missing], 15)
    older = {key: stamp(rng.randint(FIRST, LAST)) for key in stale}
    copy = {key: modified for key, modified in feed.items() if key not in missing}
    return {
        "in-sync": dict(feed),
        "missing": copy,
        "extra": {**feed, **new_versions(rng, 35)},
        "stale": {**feed, **older},
        "mixed": {**copy, **older, **new_versions(rng, 20)},
        "disjoint": new_versions(rng, 80),
        "empty": {},
    }


@pytest.fixture(params=["watermark", "commit"])
def served(request: pytest.FixtureRequest, settings: dict[str, str]) -> Iterator[tuple[str, Any]]:
    """The demo app in either order on loopback, its follower in process: ``(API URL, registry)``."""
    order = str(request.param)
    for _tamper, api, registry in serve(dict(settings, **{"feed.order": order, "feed.sequencer": "thread"})):
        yield api, registry


def test_nostr_tools_reconciles_against_the_endpoint_over_http(nostr_tools: Path, served: tuple[str, Any]) -> None:
    api, registry = served
    rng = random.Random(1977)
    feed = new_versions(rng, TENDERS)
    insert_tenders(registry.feed_store.collection("tenders"), feed, rng)
    until = wait_counted(api, TENDERS)
    assert until > LAST
    copies = cases(feed, rng)
    url = f"{api}/feeds/tenders/reconcile?until={until}"
    spec: dict[str, Any] = {
        "nostr_tools": str(nostr_tools),
        "cases": [
            {"name": name, "items": items(copy), "frame_size_limit": 4096 if name == "disjoint" else 60000}
            | {"peer": {"url": url}}
            for name, copy in copies.items()
        ],
    }
    results: dict[str, Any] = run_driver(spec, timeout=60)
    ours = {row[1] for row in items(feed)}
    for name, copy in copies.items():
        result = results[name]
        assert "error" not in result, f"{name}: {result.get('error')}"
        theirs = {row[1] for row in items(copy)}
        have, need = set(result["have"]), set(result["need"])
        assert len(have) == len(result["have"]) and len(need) == len(result["need"]), name
        assert have == theirs - ours, name
        assert need == ours - theirs, name
        # The first 16 bytes name the objects: extra or stale ones, missing or stale ones.
        assert {object_id(bytes.fromhex(ident)) for ident in have} == {
            key for key, modified in copy.items() if feed.get(key) != modified
        }, name
        assert {object_id(bytes.fromhex(ident)) for ident in need} == {
            key for key, modified in feed.items() if copy.get(key) != modified
        }, name
        assert result["largest_up"] <= (4096 if name == "disjoint" else 60000), name
    assert results["in-sync"]["rounds"] == 1 and results["in-sync"]["bytes_down"] == 1
    assert len(results["missing"]["need"]) == 40 and not results["missing"]["have"]
    assert len(results["extra"]["have"]) == 35 and not results["extra"]["need"]
    assert len(results["stale"]["have"]) == len(results["stale"]["need"]) == 15
    assert len(results["disjoint"]["have"]) == 80 and len(results["disjoint"]["need"]) == TENDERS
