"""The demo's HTTP server: no busy loop while idle, and a close that ends
the serving thread even with keep-alive connections open."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import Any

import requests

from openprocurement_feed.demo.server import DemoServer


def thread_cpu(thread: threading.Thread) -> Callable[[], float]:
    """The CPU seconds ``thread`` has used so far (its own clock: what
    other threads and processes burn does not count)."""
    assert thread.ident is not None
    clock = time.pthread_getcpuclockid(thread.ident)
    return lambda: time.clock_gettime(clock)


def test_idle_server_does_not_spin_and_closes_with_keep_alive_open(settings: dict[str, str]) -> None:
    """Idle with a keep-alive connection open, the serving loop turns about
    once per its poll timeout (``asyncore_loop_timeout``, 1 s), waiting in
    ``select``: its turns are counted (each asks the listening socket
    whether it is readable), which a loaded machine cannot raise; a busy
    loop turns thousands of times a second, even on a share of a core. The
    serving thread's own CPU clock, beside, must stay far below the wall
    time (a loaded machine lowers it, never raises it)."""
    server = DemoServer(settings, threads=2).start()
    http = requests.Session()
    listener: Any = server.http.server
    turns = 0
    readable = listener.readable

    def counted() -> bool:
        nonlocal turns
        turns += 1
        return bool(readable())

    try:
        assert http.get(server.api_url + "/tenders").status_code == 200
        cpu = thread_cpu(server.thread)
        listener.readable = counted  # read by each turn of the loop (wasyncore.poll)
        started, cpu_started, turns_started = time.monotonic(), cpu(), turns
        time.sleep(1.0)
        elapsed, idle_cpu, idle_turns = time.monotonic() - started, cpu() - cpu_started, turns - turns_started
        print(f"\nidle for {elapsed:.2f} s: {idle_turns} turns of the loop, {idle_cpu:.4f} s of its CPU")
        # a turn per poll timeout (a request's end or a wake-up adds one), with room to spare
        bound = 2 * math.ceil(elapsed / listener.adj.asyncore_loop_timeout) + 10
        assert idle_turns <= bound, f"the idle server's loop turned {idle_turns} times in {elapsed:.2f} s"
        assert idle_cpu < elapsed / 2, f"the idle serving thread burnt {idle_cpu:.2f} s of CPU in {elapsed:.2f} s"
    finally:
        server.close()
    assert not server.thread.is_alive()
    http.close()
