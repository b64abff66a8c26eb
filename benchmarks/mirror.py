"""What the mirror costs (issue 41): catching up into SQLite against ``sync
--out`` into a file, and an in-sync check of an SQLite mirror.

The feed is a stand-in served from memory by a child process (a stdlib HTTP
server): ``tenders`` items (``id``, ``dateModified``, a minute apart over the
past months) in pages with offsets, ``GET {feed}/{id}``, and a reconcile
endpoint answering from the same records (Negentropy over a sorted vector).
It costs the client nothing the real server would not, and it reads no
database, so the figures are the client's: the demo on the embedded
database takes most of an hour for a page-by-page crawl of 100,000 tenders.

* catching up: ``FeedSync`` with a :class:`JsonLinesWriter` (``sync --out``,
  each page ``fsync``-ed) against :class:`Mirror` into a fresh SQLite file
  (its default: WAL, ``synchronous = NORMAL``; a page's rows and the
  position after it in one transaction, written behind the next page's
  request), both from scratch at ``limit`` 100, :data:`ROUNDS` times each,
  alternating: pages per second (the median) and the ratio (the median of
  the rounds' ratios, and their range); and the ratio of the mirror with
  ``synchronous = FULL`` (each page's commit synced, as ``sync --out``
  syncs each page);
* the in-sync check: ``openprocurement-feed verify URL --db FILE`` in a
  child process on the mirror just made: its check's time, the command's
  wall time and its peak RSS. A feed of more than :data:`CRAWL_UP_TO`
  items is not crawled: its mirror is written straight into
  ``feed_objects`` (the table says "inserted"), the stand-in's reconcile
  endpoint holding the same records;
* with ``--bad-rows N`` (issue 41's "bad rows, found"), after the catch-up
  of a size: N rows deleted, N set to an older ``date_modified`` and N rows
  of ids the feed never had, written straight into ``feed_objects`` of the
  SQLite mirror; ``verify --db --json`` in a child process must report
  exactly those as missing, stale and extra (none changed), and ``verify
  --db --repair --json`` leave it in sync in one round, every row at the
  stand-in's version: one line per step, its time and PASS or FAIL with the
  differences. ``--bad-rows-only`` skips the timed rounds and the table
  (one catch-up by ``mirror --once`` in a child process).

``python -m benchmarks mirror --mirror-sizes 10000,100000,1000000``
``python -m benchmarks mirror --mirror-sizes 10000 --bad-rows 30 --bad-rows-only``
"""

from __future__ import annotations

import json
import multiprocessing
import random
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from .common import status, table
from .mirror_bad_rows import bad_rows, cli

#: The sizes measured by default.
SIZES = (10_000, 100_000)
#: Catching up measured this many times at each size, alternating.
ROUNDS = 3
#: Feeds of at most this many items are crawled; a larger mirror is written
#: straight into ``feed_objects`` (for its check's figures), labelled so.
CRAWL_UP_TO = 100_000
#: Rows per transaction of a mirror written straight.
DIRECT_CHUNK = 10_000
LIMIT = 100
FRAME_SIZE_LIMIT = 500_000


def make_items(count: int, start: datetime, seed: int = 1) -> list[dict[str, str]]:
    """``count`` feed items from ``start``, oldest first, a minute apart (µs
    jitter): the same items for the same arguments."""
    rng = random.Random(seed)  # nosec B311 - sample data
    items = []
    for number in range(count):
        moment = start + timedelta(seconds=60 * number, microseconds=rng.randint(0, 999_999))
        items.append({"id": uuid.UUID(int=rng.getrandbits(128)).hex, "dateModified": moment.isoformat()})
    return items


def serve(count: int, start: datetime, port_queue: Any) -> None:  # pragma: no cover - a child process
    """The stand-in feed of ``count`` items from ``start`` on a free loopback port."""
    from openprocurement_feed.reconcile import Negentropy, VectorStorage, record

    items = make_items(count, start)
    by_id = {item["id"]: item for item in items}
    storage = VectorStorage.of(record(item["id"], item["dateModified"]) for item in items)
    until = storage.get_item(storage.size() - 1).timestamp + 1 if items else 1

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            super().setup()
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # no delayed ACK per answer

        def log_message(self, *args: Any) -> None:
            pass

        def answer(self, body: bytes, kind: str = "application/json", code: int = 200) -> None:
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            parts = urlsplit(self.path)
            query = {key: values[0] for key, values in parse_qs(parts.query).items()}
            if parts.path.endswith("/reconcile"):
                self.answer(
                    json.dumps(
                        {"until": until, "protocol": 1, "frame_size_limit": FRAME_SIZE_LIMIT, "records": count}
                    ).encode()
                )
                return
            if parts.path.startswith("/api/2.5/tenders/"):
                found = by_id.get(parts.path.rsplit("/", 1)[1])
                if found is None:
                    self.answer(b'{"status": "error", "errors": []}', code=404)
                else:
                    self.answer(json.dumps({"data": found}).encode())
                return
            limit = int(query.get("limit", "100"))
            offset = query.get("offset", "")
            base = f"/api/2.5/tenders?limit={limit}"
            if query.get("descending"):
                end = int(offset[1:]) if offset.startswith("d") else count
                start = max(0, end - limit)
                page = items[start:end][::-1]
                body = {
                    "data": page,
                    "next_page": {"offset": f"d{start}", "path": base},
                    "prev_page": {"offset": str(count), "path": base},
                }
            else:
                start = int(offset or 0)
                page = items[start : start + limit]
                body = {"data": page, "next_page": {"offset": str(start + len(page)), "path": base}}
            self.answer(json.dumps(body).encode())

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            message = self.rfile.read(length)
            reply = Negentropy(storage, frame_size_limit=FRAME_SIZE_LIMIT).reconcile(message)
            self.answer(reply, "application/octet-stream")

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    port_queue.put(server.server_address[1])
    server.serve_forever()


@dataclass
class CatchUp:
    """The rounds of catching up at one size: wall and CPU seconds of each."""

    pages: int = 0
    sync_wall: list[float] = field(default_factory=list)
    sync_cpu: list[float] = field(default_factory=list)
    mirror_wall: list[float] = field(default_factory=list)
    mirror_cpu: list[float] = field(default_factory=list)
    #: the mirror with ``synchronous = FULL``: each page's commit synced, as ``sync --out`` syncs each page
    full_wall: list[float] = field(default_factory=list)


def catch_up(url: str, folder: Path, count: int, rounds: int = ROUNDS) -> CatchUp:
    """Wall and CPU seconds of ``sync --out`` and of the mirror into SQLite
    (this process's CPU: the mirror's writer thread included), ``rounds``
    times each, alternating (a machine's load drifts over both alike), and
    the pages read. The last round's mirror stays at ``folder/mirror.db``."""
    from openprocurement_feed.client import FeedSync, JsonLinesWriter
    from openprocurement_feed.client.mirror import Mirror, MirrorStore

    figures = CatchUp()
    for number in range(rounds):
        out = folder / "copy.jsonl"
        with JsonLinesWriter(out) as writer, FeedSync(url, writer, folder / "state.json", limit=LIMIT) as client:
            started, cpu = time.perf_counter(), time.process_time()
            stats = client.run()
            figures.sync_wall.append(time.perf_counter() - started)
            figures.sync_cpu.append(time.process_time() - cpu)
        assert writer.lines == count, (writer.lines, count)
        figures.pages = stats.pages
        for path in (out, folder / "state.json"):
            path.unlink()
        for synchronous in ("FULL", "NORMAL"):  # the NORMAL one stays for the check
            for path in folder.glob("mirror.db*"):
                path.unlink()
            store = MirrorStore.open(str(folder / "mirror.db"), synchronous=synchronous)
            store.create_schema()
            with store, Mirror(url, store, verify_every=0, limit=LIMIT) as mirror:
                started, cpu = time.perf_counter(), time.process_time()
                mirror.run(once=True)
                if synchronous == "FULL":
                    figures.full_wall.append(time.perf_counter() - started)
                else:
                    figures.mirror_wall.append(time.perf_counter() - started)
                    figures.mirror_cpu.append(time.process_time() - cpu)
                assert store.count("tenders") == count
        status(
            f"mirror, {count}, round {number + 1}: sync {figures.sync_wall[-1]:.2f} s "
            f"(CPU {figures.sync_cpu[-1]:.2f} s), mirror {figures.mirror_wall[-1]:.2f} s "
            f"(CPU {figures.mirror_cpu[-1]:.2f} s), mirror FULL {figures.full_wall[-1]:.2f} s, {figures.pages} pages"
        )
    return figures


def build_directly(path: Path, url: str, count: int, start: datetime) -> float:
    """An SQLite mirror of the stand-in's ``count`` items written straight
    into ``feed_objects`` (no crawl), the feed's ``feed_state`` as a crawl
    at the head would leave it: seconds."""
    from openprocurement_feed.client.mirror import MirrorStore, row_of

    started = time.perf_counter()
    items = make_items(count, start)
    store = MirrorStore.open(str(path))
    store.create_schema()
    state = {"url": url, "mode": "", "opt_fields": "", "objects": False, "next_offset": str(count)}
    state.update(backward_done=True, items=count, pages=0, restarts=0)
    with store:
        for start in range(0, count, DIRECT_CHUNK):
            store.write_page("tenders", [row_of(item) for item in items[start : start + DIRECT_CHUNK]], state)
        assert store.count("tenders") == count
    return time.perf_counter() - started


#: ``openprocurement-feed`` run so that it prints, last on its standard
#: error, its own peak RSS: ``VmHWM`` of its memory after ``exec``. (The
#: ``ru_maxrss`` of ``wait4`` keeps the high-water mark of the memory the
#: child was forked with: this benchmark's own, hundreds of MB with a feed
#: of a million items in hand.)
MEASURED = (
    "import sys\n"
    "from openprocurement_feed.cli import main\n"
    "code = main(sys.argv[1:])\n"
    "with open('/proc/self/status') as status:\n"
    "    peak = [line.split()[1] for line in status if line.startswith('VmHWM:')][0]\n"
    "print('peak-rss-kb', peak, file=sys.stderr)\n"
    "sys.exit(code)\n"
)


def check(url: str, folder: Path) -> tuple[float, float, float, int]:
    """``verify --db`` in a child process: the check's seconds, the wall
    seconds, the child's peak RSS in MB, the rounds."""
    command = [sys.executable, "-c", MEASURED, "verify", url, "--db", str(folder / "mirror.db"), "--json"]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, check=False)
    wall = time.perf_counter() - started
    result = json.loads(done.stdout)
    assert done.returncode == 0 and result["in_sync"], result
    peak = next(line.split()[1] for line in done.stderr.decode().splitlines() if line.startswith("peak-rss-kb"))
    return float(result["elapsed"]), wall, int(peak) / 1024, int(result["rounds"])


def run(sizes: tuple[int, ...] = SIZES, rounds: int = ROUNDS, *, bad: int = 0, bad_only: bool = False) -> bool:
    """The table of every size; with ``bad`` > 0 also the bad-rows scenario
    after each size's catch-up (with ``bad_only`` that alone, after one
    catch-up by ``mirror --once``). True when every scenario passed."""
    if bad and bad_only:
        return all([run_bad_rows(count, bad) for count in sizes])
    rows = []
    passed = True
    for count in sizes:
        crawled = count <= CRAWL_UP_TO
        context = multiprocessing.get_context("spawn")
        queue: Any = context.Queue()
        start = datetime.now(timezone.utc) - timedelta(days=count // 1440 + 2)  # the last item in the past
        server = context.Process(target=serve, args=(count, start, queue), daemon=True)
        server.start()
        try:
            url = f"http://127.0.0.1:{queue.get(timeout=600)}/api/2.5/tenders"
            with tempfile.TemporaryDirectory(prefix="mirror-bench-") as name:
                folder = Path(name)
                if crawled:
                    figures = catch_up(url, folder, count, rounds)
                    ratios = [one / other for one, other in zip(figures.sync_wall, figures.mirror_wall, strict=True)]
                    sync_rate = f"{figures.pages / statistics.median(figures.sync_wall):.0f}"
                    mirror_rate = f"{figures.pages / statistics.median(figures.mirror_wall):.0f}"
                    ratio = f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})"
                    full = [one / other for one, other in zip(figures.sync_wall, figures.full_wall, strict=True)]
                    ratio_full = f"{statistics.median(full):.2f} ({min(full):.2f}-{max(full):.2f})"
                    cpu = (
                        f"{1000 * statistics.median(figures.sync_cpu) / figures.pages:.2f} / "
                        f"{1000 * statistics.median(figures.mirror_cpu) / figures.pages:.2f}"
                    )
                    how = "crawled"
                else:
                    seconds = build_directly(folder / "mirror.db", url, count, start)
                    status(f"mirror, {count}: written straight into feed_objects in {seconds:.1f} s")
                    sync_rate = mirror_rate = ratio = ratio_full = cpu = "-"
                    how = "inserted"
                check_seconds, wall, rss, rounds_of_check = check(url, folder)
                if bad:
                    passed = bad_rows(url, folder / "mirror.db", make_items(count, start), bad) and passed
        finally:
            server.terminate()
            server.join()
        rows.append(
            (
                f"{count:,}",
                how,
                sync_rate,
                mirror_rate,
                ratio,
                ratio_full,
                cpu,
                f"{check_seconds:.2f}",
                f"{wall:.2f}",
                f"{rss:.0f}",
                rounds_of_check,
            )
        )
    print(
        table(
            (
                "rows",
                "mirror built",
                "sync --out pages/s",
                "mirror pages/s",
                "ratio (min-max)",
                "ratio, mirror FULL",
                "CPU ms/page sync / mirror",
                "check s",
                "verify --db wall s",
                "peak RSS MB",
                "rounds",
            ),
            rows,
        )
    )
    print(f"(limit {LIMIT}; pages/s: the median of {rounds} rounds, sync and mirror alternating; ratio: the")
    print(" median of the rounds' mirror/sync speed ratios, their range in brackets; mirror FULL: the mirror with")
    print(" synchronous = FULL, each page's commit synced as sync --out syncs each page; CPU: the client process's")
    print(" (the mirror's writer thread included), the median of the rounds; 'inserted': rows written")
    print(" straight into feed_objects, no crawl, checked against the stand-in's reconcile endpoint holding")
    print(" the same records; peak RSS of the verify --db process, its Python, SQLAlchemy and the check)")
    return passed


def run_bad_rows(count: int, bad: int) -> bool:
    """The bad-rows scenario alone at ``count`` tenders: the stand-in, one
    catch-up by ``mirror URL --db FILE --once`` in a child process, then
    :func:`bad_rows`."""
    context = multiprocessing.get_context("spawn")
    queue: Any = context.Queue()
    start = datetime.now(timezone.utc) - timedelta(days=count // 1440 + 2)
    server = context.Process(target=serve, args=(count, start, queue), daemon=True)
    server.start()
    try:
        url = f"http://127.0.0.1:{queue.get(timeout=600)}/api/2.5/tenders"
        items = make_items(count, start)
        with tempfile.TemporaryDirectory(prefix="mirror-bench-") as name:
            path = Path(name) / "mirror.db"
            args = ("mirror", url, "--db", str(path), "--once", "--no-progress", "--limit", str(LIMIT))
            code, _, seconds = cli(*args)
            if code != 0:
                print(f"bad rows, {count:,}: catch-up (mirror --once): {seconds:.2f} s: FAIL: exit {code}", flush=True)
                return False
            with sqlite3.connect(path) as connection:
                held = dict(connection.execute("SELECT id, date_modified FROM feed_objects WHERE feed = 'tenders'"))
                last = connection.execute("SELECT last_check_result FROM feed_state WHERE feed = 'tenders'").fetchone()
            connection.close()
            ok = code == 0 and held == {item["id"]: item["dateModified"] for item in items}
            ok = ok and bool(last) and last[0] == "in sync"
            verdict = "PASS" if ok else f"FAIL: exit {code}, {len(held):,} rows, last_check_result {last and last[0]!r}"
            print(
                f"bad rows, {count:,}: catch-up (mirror --once, limit {LIMIT}): {seconds:.2f} s: {verdict} "
                f"({len(held):,} rows, every one at the server's version, check: {last and last[0]!r})",
                flush=True,
            )
            return bad_rows(url, path, items, bad) and ok
    finally:
        server.terminate()
        server.join()
