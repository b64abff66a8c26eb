"""An independent implementation as the initiator against our responder.

The NIP-77 ``Negentropy`` of the npm package nostr-tools (a port of the
reference JavaScript; pinned in ``tests/interop/package.json``, installed on
first use) initiates, and our harness (``python -m
openprocurement_feed.reconcile.harness``) responds, through the node script
``tests/interop/nip77_initiator.mjs``. Its responder never answers an id
list, so it plays only this role.

nostr-tools writes and reads varints of 32 bits only: timestamps must stay
below 2**32 (seconds, as nostr uses them). With the microseconds of the
feed's records it never converges (the last test pins that down).
"""

from __future__ import annotations

import random
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from tests.interop.nostr_tools import HARNESS, pinned_version, run_driver

pytestmark = pytest.mark.server

BASE = 1_700_000_000
MICROS = "microseconds"
Items = list[list[Any]]


def _items(rng: random.Random, n: int, width: int, base: int = BASE) -> Items:
    return [[base + rng.randrange(width), rng.randbytes(32).hex()] for _ in range(n)]


@cache
def _cases() -> dict[str, dict[str, Any]]:
    """name -> the initiator's set, the responder's set and the two frame size limits."""
    rng = random.Random(77)
    cases: dict[str, dict[str, Any]] = {}

    def add(name: str, common: Items, ours: Items, theirs: Items, limit: int = 60000, peer_limit: int = 0) -> None:
        cases[name] = {"items": common + theirs, "peer_items": common + ours, "limit": limit, "peer_limit": peer_limit}

    add("overlap", _items(rng, 1000, 1500), _items(rng, 40, 1500), _items(rng, 35, 1500))
    add("disjoint", [], _items(rng, 200, 10**6), _items(rng, 180, 10**6))
    add("in-sync", _items(rng, 1500, 10**5), [], [])
    add("equal-timestamps", _items(rng, 600, 1), _items(rng, 15, 1), _items(rng, 12, 1))
    add("frame-4096", _items(rng, 1500, 2000), _items(rng, 100, 2000), _items(rng, 100, 2000), 4096, 4096)
    add("frame-responder-larger", _items(rng, 600, 1000), _items(rng, 300, 1000), _items(rng, 10, 1000), 4096, 16384)
    add("empty", [], [], [])
    add("empty-initiator", [], _items(rng, 300, 5000), [], 4096, 4096)
    add("empty-responder", [], [], _items(rng, 300, 5000))
    return cases


def _run_all(nostr_tools: Path) -> dict[str, dict[str, Any]]:
    """Every case, run concurrently by one node process against our harness."""
    spec: dict[str, Any] = {
        "nostr_tools": str(nostr_tools),
        "cases": [
            {
                "name": name,
                "items": case["items"],
                "frame_size_limit": case["limit"],
                "peer": {"harness": HARNESS, "items": case["peer_items"], "frame_size_limit": case["peer_limit"]},
            }
            for name, case in _cases().items()
        ],
    }
    # Timestamps in microseconds, like the feed's records, end with an error after a few rounds.
    rng = random.Random(78)
    common = _items(rng, 100, 10**9, base=1_700_000_000_000_000)
    micros = common + _items(rng, 5, 10**9, base=1_700_000_000_000_000)
    spec["cases"].append(
        {"name": MICROS, "items": common, "max_rounds": 5, "peer": {"harness": HARNESS, "items": micros}}
    )
    return run_driver(spec)


def test_nostr_tools_reconciles_against_our_responder(nostr_tools: Path) -> None:
    """One node process runs every case at once (one test, so that parallel workers run it once)."""
    results = _run_all(nostr_tools)
    for name, case in _cases().items():
        result = results[name]
        assert "error" not in result, f"{name}: {result.get('error')}"
        initiator = {id for _, id in case["items"]}
        responder = {id for _, id in case["peer_items"]}
        assert sorted(result["have"]) == sorted(initiator - responder), name
        assert sorted(result["need"]) == sorted(responder - initiator), name
        assert not case["peer_limit"] or result["largest_down"] <= case["peer_limit"], name
        assert result["largest_up"] <= case["limit"], name
        assert initiator != responder or result["rounds"] == 1, name
    assert results["frame-4096"]["rounds"] > 3
    assert results["in-sync"]["bytes_down"] == 1
    # Its 32-bit varints garble timestamps of 2**32 and more: the feed's records are out of its reach.
    assert "error" in results[MICROS], "nostr-tools now reconciles 64-bit timestamps: the docs and SPEC G.6 can say so"


def test_nostr_tools_is_the_pinned_version(nostr_tools: Path) -> None:
    assert f'"version": "{pinned_version()}"' in (nostr_tools / "package.json").read_text(encoding="utf-8")
