"""How soon a watcher follows again after a fault that marks the server
unknown: its client's monitor polling against streaming.

``python -m benchmarks recovery`` starts the embedded server with test
commands and the demo API in watermark order, then, per round and per
monitoring mode in alternating order, an observer of ``tenders`` on a client
named as the sequencer's, its URI with ``serverMonitoringMode=poll`` or
``stream``. The ``failCommand`` fail point fails every ``getMore`` and
``aggregate`` of that client with code 91 (a node shutting down: the driver
marks the server unknown) for ``--recovery-hold`` seconds, a tender is
patched meanwhile, the fail point is cleared, and the figure is the time
from the clear until the observer has read the patch. It prints each round
and the median of each mode.
"""

from __future__ import annotations

import statistics
import time
import uuid
from typing import Any

from openprocurement_feed import shutdown
from openprocurement_feed.commit.sequencer import Sequencer
from openprocurement_feed.embedded.server import EmbeddedServer
from openprocurement_feed.faults.failpoint import FailPoint
from openprocurement_feed.roles import SEQUENCER, open_client
from openprocurement_feed.testing import make_settings

from .common import table

MODES = ("poll", "stream")
#: seconds a round waits for the observer to read the patch
TIMEOUT = 60.0


def with_mode(uri: str, mode: str) -> str:
    """``uri`` with ``serverMonitoringMode=mode``."""
    return f"{uri}{'&' if '?' in uri else '?'}serverMonitoringMode={mode}"


def one_round(uri: str, db_name: str, web: Any, tender: str, mode: str, hold: float, fail: FailPoint) -> float:
    """Seconds from the fault's end until an observer on a client of
    ``mode`` has read the patch made during it."""
    client = open_client(with_mode(uri, mode), SEQUENCER, 5000, role=True)
    sequencer = Sequencer(client[db_name], {}, observed=["tenders"]).start()
    observer = sequencer.followers[0]
    try:
        deadline = time.monotonic() + TIMEOUT
        while observer.observed_token is None:  # its stream is open and read
            if time.monotonic() > deadline:
                raise RuntimeError("the observer did not start")
            time.sleep(0.02)
        fail.arm(
            {
                "mode": "alwaysOn",
                "data": {"failCommands": ["getMore", "aggregate"], "errorCode": 91, "appName": SEQUENCER},
            }
        )
        time.sleep(hold / 2)
        before = observer.stats.events
        web.patch_json(f"/api/2.5/tenders/{tender}", {"data": {"description": uuid.uuid4().hex}})
        time.sleep(hold / 2)
        fail.clear()
        cleared = time.monotonic()
        while observer.stats.events <= before:
            if time.monotonic() - cleared > TIMEOUT:
                raise RuntimeError(
                    f"{mode}: the observer did not read the patch within {TIMEOUT:g} s of the fault's end"
                )
            time.sleep(0.01)
        return time.monotonic() - cleared
    finally:
        fail.clear()
        sequencer.stop()
        client.close()


def run(rounds: int = 4, hold: float = 3.0) -> dict[str, list[float]]:
    """Measure ``rounds`` rounds of each mode; print them and the medians."""
    from webtest import TestApp

    from openprocurement_feed.demo import main

    results: dict[str, list[float]] = {mode: [] for mode in MODES}
    with EmbeddedServer(extra_args=("--enable-test-commands",)) as server:
        db_name = f"recovery_{uuid.uuid4().hex[:8]}"
        app = main({}, **make_settings(server.uri, db_name, feed_sequencer="off"))
        fail = FailPoint(server.uri)
        try:
            web = TestApp(app)
            tender = web.post_json("/api/2.5/tenders", {"data": {"title": "recovery"}}).json["data"]["id"]
            for number in range(rounds):
                order = MODES if number % 2 == 0 else MODES[::-1]
                for mode in order:
                    seconds = one_round(server.uri, db_name, web, tender, mode, hold, fail)
                    results[mode].append(seconds)
                    print(f"round {number + 1}/{rounds} {mode:6}: followed again {seconds:.2f} s after the fault's end")
        finally:
            fail.close()
            shutdown(app.registry)
    rows = [
        [mode, f"{statistics.median(values):.2f}", f"{min(values):.2f}", f"{max(values):.2f}"]
        for mode, values in results.items()
    ]
    print(f"\ncode 91 on the observer's reads for {hold:g} s, {rounds} rounds per mode:")
    print(table(["monitoring", "median s", "min s", "max s"], rows))
    return results
