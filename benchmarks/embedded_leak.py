"""The embedded server's memory per transaction, with and without the mend of
the WiredTiger binding's leak.

``python -m benchmarks embedded-leak`` starts one server with the mend and one
without (``EmbeddedServer(mend_leaks=False)``), runs small multi-document
transactions (one 2 KB document written per transaction, as the demo's
writes) and change-stream ``getMore`` calls that find an entry against each,
and prints the server process's resident memory growth (``VmRSS`` of
``/proc/PID/status``) per 1,000 of each, after a warm-up that is left out.

Without the mend, every transaction leaves its WiredTiger session and the
cursors it opened in the server's memory (with the last document each held),
and every such ``getMore`` leaves one session and one cursor.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pymongo import MongoClient

from openprocurement_feed.embedded.server import EmbeddedServer

from .common import table

#: The document written in each transaction: about 2 KB.
DOCUMENT_BYTES = 2048
#: Documents the transactions write in turn.
DOCUMENTS = 50
#: The server's flags: an oplog bound, so that the oplog's own growth (one
#: entry of about 2 KB per write, kept up to 100,000 by default) does not
#: hide what the leak adds.
SERVER_FLAGS = ("--oplog-max-entries", "200", "--cache-size", "16M")


def server_pid(server: EmbeddedServer) -> int:
    """The pid of the server itself: the deepest descendant of the process
    the server object started (a throwaway folder's server runs under the
    guard, :mod:`openprocurement_feed.embedded.guard`), or that process."""
    assert server.process is not None
    pid = server.process.pid
    while True:
        try:
            with open(f"/proc/{pid}/task/{pid}/children", encoding="ascii") as handle:
                children = handle.read().split()
        except OSError:
            return pid
        if not children:
            return pid
        pid = int(children[-1])


def rss_mb(pid: int) -> float:
    """``VmRSS`` of ``pid`` in MB (``/proc/PID/status``)."""
    with open(f"/proc/{pid}/status", encoding="ascii") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    raise RuntimeError(f"no VmRSS for process {pid}")


def run_transactions(client: MongoClient[Any], count: int, key: str = "t") -> None:
    """``count`` transactions, each writing one 2 KB document and committing
    (the documents' ``_id`` start with ``key``: concurrent runs with keys
    of their own do not conflict)."""
    collection = client.bench_leak.docs
    for number in range(count):
        pad = os.urandom(DOCUMENT_BYTES // 2).hex()
        with client.start_session() as session, session.start_transaction():
            selector = {"_id": f"{key}{number % DOCUMENTS}"}
            collection.update_one(selector, {"$set": {"pad": pad}}, upsert=True, session=session)


def run_change_stream_reads(client: MongoClient[Any], count: int, key: str = "c", timeout: float = 30.0) -> None:
    """``count`` change-stream ``getMore`` calls that each find an entry: a
    plain write of a 2 KB field (to documents whose ``_id`` start with
    ``key``), then a read of the stream until a change comes."""
    collection = client.bench_leak.watched
    with collection.watch(max_await_time_ms=1000) as stream:
        for number in range(count):
            pad = os.urandom(DOCUMENT_BYTES // 2).hex()
            collection.update_one({"_id": f"{key}{number % DOCUMENTS}"}, {"$set": {"pad": pad}}, upsert=True)
            deadline = time.monotonic() + timeout
            while stream.try_next() is None:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"change {number} did not reach the change stream within {timeout:.0f} s")


@dataclass(frozen=True)
class Growth:
    """A server's RSS growth over a workload."""

    mend: str
    count: int
    before_mb: float
    after_mb: float

    @property
    def per_thousand_mb(self) -> float:
        """MB of RSS per 1,000 operations."""
        return (self.after_mb - self.before_mb) * 1000.0 / self.count


def measure(
    workload: Callable[[MongoClient[Any], int], None], count: int, mend_leaks: bool, warm_up: int = 300
) -> Growth:
    """The RSS growth of a fresh server (with the mend or without) over
    ``count`` operations of ``workload``, after ``warm_up`` of them."""
    with EmbeddedServer(mend_leaks=mend_leaks, extra_args=SERVER_FLAGS) as server:
        client: MongoClient[Any] = MongoClient(server.uri)
        try:
            pid = server_pid(server)
            workload(client, warm_up)
            before = rss_mb(pid)
            workload(client, count)
            after = rss_mb(pid)
        finally:
            client.close()
        return Growth(server.leak_mend or "unknown", count, before, after)


def run(transactions: int = 5000, reads: int = 2000) -> None:
    """Print the RSS growth per 1,000 transactions and per 1,000 change-stream
    reads, each after a warm-up (WiredTiger's own memory settles in the first
    few thousand operations)."""
    rows = []
    for name, workload, count, warm_up in (
        ("transactions", run_transactions, transactions, 3000),
        ("change-stream getMores", run_change_stream_reads, reads, 2000),
    ):
        for mend_leaks in (False, True):
            started = time.monotonic()
            growth = measure(workload, count, mend_leaks, warm_up=warm_up)
            rows.append(
                [
                    name,
                    "on" if mend_leaks else "off",
                    f"{warm_up}",
                    f"{growth.count}",
                    f"{growth.before_mb:.1f}",
                    f"{growth.after_mb:.1f}",
                    f"{growth.per_thousand_mb:+.2f}",
                    f"{time.monotonic() - started:.0f}",
                ]
            )
    print("The embedded server's RSS growth, without and with the mend of the binding's leak")
    print(table(["workload", "mend", "warm-up", "count", "RSS before MB", "after MB", "MB / 1,000", "s"], rows))
