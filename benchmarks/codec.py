"""Throughput of the offset codec: offsets parsed and composed per second."""

from __future__ import annotations

import timeit
from collections.abc import Callable

from openprocurement_feed.store.offset import InvalidOffset, compose_offset, parse_offset

from .common import table

IDS_1 = ["0f8c5a2e9b7d4c1a8e3f6b2d9c0a7e41"]
IDS_10 = [f"{number:032x}" for number in range(10)]
PARSE_CASES = {
    "current (pm.n.hash)": compose_offset(1_778_583_600.49, IDS_1),
    "bare float": "1778583600.49",
    "legacy public_ts": "1778583600.0000000042",
    "legacy ISO date": "2026-05-12T12:00:00.490000 03:00",
    "invalid (404)": "1778583600.49.x.y.z",
}


def _parse(raw: str) -> Callable[[], object]:
    def call() -> object:
        try:
            return parse_offset(raw)
        except InvalidOffset:
            return None

    return call


def rate(call: Callable[[], object]) -> float:
    """Calls per second: the best of three runs of at least 0.2 s each."""
    number = max(1, timeit.Timer(call).autorange()[0])
    return number / min(timeit.repeat(call, number=number, repeat=3))


def run() -> None:
    """Print parse and compose rates."""
    rows = []
    for name, raw in PARSE_CASES.items():
        per_second = rate(_parse(raw))
        rows.append([f"parse {name}", f"{per_second:,.0f}", f"{1e6 / per_second:.2f}"])
    for name, ids in (("1 id at the boundary", IDS_1), ("10 ids at the boundary", IDS_10)):
        per_second = rate(lambda ids=ids: compose_offset(1_778_583_600.49, ids))
        rows.append([f"compose, {name}", f"{per_second:,.0f}", f"{1e6 / per_second:.2f}"])
    print("Offset codec throughput (one thread):")
    print(table(["operation", "per second", "µs each"], rows))
