"""``openprocurement-feed run``: the demo API with a live feed on one machine.

Starts the embedded database, serves the demo API, seeds real-shaped tenders,
plans and contracts and keeps background writers patching all three at the
asked rate, so the feeds move. Every --status-every seconds the status
(:mod:`.run_status`) shows one row per feed (verdict, lag p50/p99,
checkpoint age, patches/s): a table redrawn in place on a terminal, one
plain line per feed when stderr is not a terminal. Ctrl-C stops the
writers, the HTTP server and the database, and says the rate asked and the
rate achieved.

Writes need a broker's key from ``--auth-file`` (by default the demo brokers
shipped with the package; one key is printed at start-up): the writers send
the first broker's key and each object's access token. The tokens live only
in this process, so with an auth file each run creates its own sample
objects, also in a kept ``--data-dir``.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from pyramid.exceptions import ConfigurationError

from ..cli import CommandError
from .options import (
    MONGODB_URI,
    WRITE_DELAY,
    Flag,
    add_command,
    non_negative_float,
    port_number,
    positive_float,
    positive_int,
    watermark_seconds,
)

#: Parallel clients that create the sample objects.
SEED_CLIENTS = 4
#: A status line warns when the achieved rate is below this share of the asked.
SHORTFALL = 0.9


HELP = "serve the demo API with a live feed on the embedded database"
FLAGS = (
    Flag("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)"),
    Flag("--port", type=port_number, default=6543, help="port to listen on (default: %(default)s)"),
    Flag(
        "--watermark",
        type=watermark_seconds,
        default=1.0,
        help="feed watermark W in seconds, 0 disables it (default: %(default)s)",
    ),
    Flag(
        "--order",
        choices=("commit", "watermark"),
        default="commit",
        help="the order of the main feed; the other order is served beside it (default: %(default)s)",
    ),
    Flag(
        "--rate",
        type=non_negative_float,
        default=5.0,
        help="background patches per second, 0 for none (default: %(default)s)",
    ),
    Flag("--tenders", type=positive_int, default=30, help="sample tenders to create (default: %(default)s)"),
    Flag("--plans", type=positive_int, default=20, help="sample plans to create (default: %(default)s)"),
    Flag("--contracts", type=positive_int, default=20, help="sample contracts to create (default: %(default)s)"),
    Flag("--seed", type=int, default=1, help="seed of the sample documents (default: %(default)s)"),
    WRITE_DELAY,
    Flag(
        "--status-every",
        type=positive_float,
        default=30.0,
        metavar="S",
        help="seconds between two status lines (default: %(default)s)",
    ),
    Flag("--data-dir", default=None, help="keep the database in this folder (default: a throwaway folder)"),
    Flag(
        "--auth-file",
        default=None,
        metavar="PATH",
        help="the brokers' keys (demo.auth_file; a path or package:path), '' for open writes "
        "(default: the demo brokers of openprocurement_feed.demo:auth.ini)",
    ),
    MONGODB_URI,
)


def add_parser(subparsers: Any) -> None:
    """Register ``run`` and its flags."""
    add_command(subparsers, "run", run, __doc__, help=HELP, flags=FLAGS)


def _settings(args: argparse.Namespace) -> dict[str, str]:
    from ..demo.auth import PACKAGED_AUTH_FILE

    uri = args.mongodb_uri or ("embedded://" + (args.data_dir or ""))
    return {
        "mongodb.uri": uri,
        "mongodb.db_name": "openprocurement_demo",
        "feed.watermark_seconds": str(args.watermark),
        "feed.order": args.order,
        "feed.sequencer": "thread",
        "demo.write_delay_ms": args.write_delay,
        "demo.both_orders": "true",
        "demo.auth_file": PACKAGED_AUTH_FILE if args.auth_file is None else args.auth_file,
    }


@dataclass(frozen=True)
class RateMeter:
    """The patch rate the writers achieved over the run, against the rate asked."""

    asked: float

    def overall(self, writers: Sequence[Any], elapsed: float) -> str:
        """``N patches written by K writers in S s; asked R/s, achieved
        A/s`` (and a warning when the writers fell short of the rate)."""
        patches = sum(writer.stats.patches for writer in writers)
        achieved = patches / max(elapsed, 1e-9)
        text = (
            f"{patches} patches written by {len(writers)} writers in {elapsed:.0f} s; "
            f"asked {self.asked:g}/s, achieved {achieved:.1f}/s"
        )
        if achieved < SHORTFALL * self.asked:
            text += " (below the rate asked: the API cannot keep up)"
        return text


def stop_on_signals(stop: threading.Event) -> None:
    """Ctrl-C (SIGINT) and SIGTERM (``docker stop``, systemd) set ``stop``.

    The handler only sets the event: the main thread notices it between
    steps and stops the writers, the HTTP server and the database in order.
    An exception raised from a signal handler could land inside a driver
    call or a lock and leave the shutdown waiting on it.
    """

    def handler(signum: int, frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)


def seed(
    server: Any, args: argparse.Namespace, stop: threading.Event | None = None, access: Any = None
) -> list[tuple[str, str]]:
    """Create the missing sample objects of each resource; every object's
    ``(resource, id)``, for the writers. Ends early when ``stop`` is set.

    With a key in ``access`` (:class:`~openprocurement_feed.demo.load.Access`)
    the objects are created with it and only the objects whose tokens
    ``access`` holds are targets: the sample set is created afresh."""
    from ..demo.load import Access, create_objects

    access = access or Access()
    store = server.registry.feed_store
    api = server.api_url
    wanted = {"tenders": args.tenders, "plans": args.plans, "contracts": args.contracts}
    targets: list[tuple[str, str]] = []
    for number, (resource, count) in enumerate(wanted.items()):
        collection = store.collection(server.registry.feed_settings.collection_name(resource))
        existing = 0 if access.key else collection.estimated_document_count()
        if existing < count:
            tender_ids = [target for kind, target in targets if kind == "tenders"]
            missing = count - existing
            shares = [
                missing // SEED_CLIENTS + (1 if part < missing % SEED_CLIENTS else 0) for part in range(SEED_CLIENTS)
            ]
            with ThreadPoolExecutor(max_workers=SEED_CLIENTS) as pool:
                futures = [
                    pool.submit(
                        create_objects,
                        api,
                        resource,
                        share,
                        seed=(args.seed * 10 + number) * 100 + part,
                        tender_ids=tender_ids,
                        stop=stop,
                        access=access,
                    )
                    for part, share in enumerate(shares)
                    if share
                ]
                for future in futures:
                    future.result()
        ids = [doc["_id"] for doc in collection.find({}, {"_id": 1})]
        targets += [(resource, one) for one in ids if not access.key or one in access.tokens]
    return targets


def writer_count(args: argparse.Namespace) -> int:
    """Enough writer threads to reach ``--rate`` with ``--write-delay``."""
    from ..demo.load import writers_for_rate
    from ..demo.settings import parse_delay

    return writers_for_rate(args.rate, parse_delay(args.write_delay, "--write-delay"))


def start_writers(
    api: str, targets: list[tuple[str, str]], args: argparse.Namespace, count: int, access: Any = None
) -> list[Any]:
    """``count`` writer threads sharing one schedule at ``--rate`` (and the
    key and tokens of ``access``), each counting its patches per resource."""
    from ..demo.load import Pacer
    from .run_status import CountingWriter

    pacer = Pacer(args.rate) if count else None
    resource_of = {object_id: resource for resource, object_id in targets}
    writers = [
        CountingWriter(
            api,
            targets,
            resource_of=resource_of,
            pacer=pacer,
            seed=args.seed * 1000 + number,
            name=f"background-writer-{number}",
            access=access,
        )
        for number in range(count)
    ]
    for writer in writers:
        writer.start()
    return writers


def access_lines(server: Any, api: str) -> str:
    """The start-up lines about writes: a broker's key and how to send it,
    or that writes are open."""
    key = server.writer_key
    if key is None:
        return "Writes: open to anyone (no --auth-file)\n"
    users = server.registry.demo_users
    return (
        f"Writes need a broker's key ({len(users)} users in {users.source}), e.g. {key}:\n"
        f"  curl -H 'Authorization: Bearer {key}' -H 'Content-Type: application/json' "
        f"""-d '{{"data": {{"title": "Fuel"}}}}' {api}/tenders\n"""
        "  then PATCH with the returned access.token as ?acc_token= or X-Access-Token\n"
    )


def run(args: argparse.Namespace) -> int:
    from ..demo.load import Access, CreateFailed
    from ..demo.server import DemoServer

    stop = threading.Event()
    stop_on_signals(stop)
    print("Starting the embedded database and the demo API...", file=sys.stderr)
    count = writer_count(args)
    try:
        # HTTP threads for every writer, and as many again for crawlers.
        server = DemoServer(_settings(args), host=args.host, port=args.port, threads=max(8, 2 * count))
    except ConfigurationError as error:
        raise CommandError(str(error)) from None
    except OSError as error:
        raise CommandError(f"cannot listen on {args.host}:{args.port}: {error}") from None
    writers: list[Any] = []
    meter: RateMeter | None = None
    started = time.monotonic()
    try:
        server.start()
        api = server.api_url
        sequencer = server.registry.feed_sequencer
        if sequencer is not None:
            deadline = time.monotonic() + 30
            while not (stop.is_set() or sequencer.wait_ready(timeout=0.2)) and time.monotonic() < deadline:
                pass
        other = "watermark" if args.order == "commit" else "commit"
        print(
            f"\nDemo API:  {api}/{{tenders,plans,contracts}}  (POST to create, PATCH {{id}} to change)\n"
            f"Live feeds ({args.order} order):\n"
            f"  {api}/tenders?descending=1\n"
            f"  {api}/plans?descending=1\n"
            f"  {api}/contracts?descending=1\n"
            f"Same tenders ({other} order): {api}/tenders-{other}?descending=1\n"
            f"Health: {server.url}{server.registry.feed_settings.health_path}\n"
            f"Watermark: {args.watermark:g} s; background writers: {args.rate:g} patches/s asked\n"
            + access_lines(server, api)
            + "Press Ctrl-C to stop.\n",
            flush=True,
        )
        print("Seeding tenders, plans and contracts...", file=sys.stderr, flush=True)
        seeding = time.monotonic()
        access = Access(server.writer_key)
        try:
            targets = seed(server, args, stop, access)
        except CreateFailed as error:
            # the database stayed unavailable through every retry: say so,
            # stop cleanly (no traceback), and leave nothing half-running
            print(f"Seeding stopped: {error}", file=sys.stderr, flush=True)
            stop.set()
            targets = []
        kinds = Counter(kind for kind, _ in targets)
        print(
            f"Seeded: {kinds['tenders']} tenders, {kinds['plans']} plans, "
            f"{kinds['contracts']} contracts ({time.monotonic() - seeding:.1f} s); "
            f"{count} writers for {args.rate:g} patches/s",
            file=sys.stderr,
            flush=True,
        )
        if args.rate > 0 and not stop.is_set():
            writers = start_writers(api, targets, args, count, access)
        meter = RateMeter(args.rate) if writers else None
        started = time.monotonic()
        show_status(server.registry, writers, stop, args.status_every, started)
        print("\nStopping...", file=sys.stderr)
    except KeyboardInterrupt:
        print("\nStopping...", file=sys.stderr)
    finally:
        for writer in writers:
            writer.stop()
        for writer in writers:
            writer.join(timeout=5)
        writing = time.monotonic() - started
        server.close()
    if meter is not None:
        print(meter.overall(writers, writing), file=sys.stderr)
    print("Stopped: HTTP server and database are down.", file=sys.stderr)
    return 0


def show_status(registry: Any, writers: Sequence[Any], stop: threading.Event, every: float, started: float) -> None:
    """Every ``every`` seconds until ``stop``: one row per feed on stderr
    (:mod:`.run_status`)."""
    from ..operations.health import health_report
    from .run_status import StatusBoard, StatusOutput

    settings = registry.feed_settings
    collection_of = {resource: settings.collection_name(resource) for resource in ("tenders", "plans", "contracts")}
    collections = {feed.name: feed.collection for feed in registry.feed_definitions.values()}
    board = StatusBoard(collection_of)
    output = StatusOutput(sys.stderr)
    try:
        while not stop.wait(every):
            rows = board.rows(health_report(registry), collections, writers)
            patches = sum(writer.stats.patches for writer in writers)
            output.show(time.monotonic() - started, rows, f"{patches} patches written; Ctrl-C stops")
    finally:
        output.close()
