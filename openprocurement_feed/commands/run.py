"""``openprocurement-feed run``: the demo API with a live feed on one machine.

Starts the embedded database, serves the demo API, seeds sample tenders and
keeps a background writer patching them so the feed moves. Ctrl-C stops the
writer, the HTTP server and the database.
"""
from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from typing import Any

from pyramid.exceptions import ConfigurationError

from ..cli import CommandError
from .options import (
    delay_range,
    non_negative_float,
    port_number,
    positive_float,
    positive_int,
    watermark_seconds,
)


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "run",
        help="serve the demo API with a live feed on the embedded database",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)")
    parser.add_argument("--port", type=port_number, default=6543, help="port to listen on (default: %(default)s)")
    parser.add_argument(
        "--watermark", type=watermark_seconds, default=1.0,
        help="feed watermark W in seconds, 0 disables it (default: %(default)s)",
    )
    parser.add_argument(
        "--order", choices=("commit", "watermark"), default="commit",
        help="the order of the main feed; the other order is served beside it "
             "(default: %(default)s)",
    )
    parser.add_argument(
        "--rate", type=non_negative_float, default=5.0,
        help="background patches per second, 0 for none (default: %(default)s)",
    )
    parser.add_argument("--tenders", type=positive_int, default=30, help="sample tenders to create (default: %(default)s)")
    parser.add_argument(
        "--write-delay", type=delay_range, default="0", metavar="MS",
        help="ms a write stays open after its stamp: 0, 20 or a range 5-40 (default: %(default)s)",
    )
    parser.add_argument(
        "--status-every", type=positive_float, default=30.0, metavar="S",
        help="seconds between two status lines (default: %(default)s)",
    )
    parser.add_argument(
        "--data-dir", default=None,
        help="keep the database in this folder (default: a throwaway folder)",
    )
    parser.add_argument(
        "--mongodb-uri", default=None,
        help="use this MongoDB instead of the embedded database",
    )
    parser.set_defaults(func=run)


def _settings(args: argparse.Namespace) -> dict[str, str]:
    uri = args.mongodb_uri or ("embedded://" + (args.data_dir or ""))
    return {
        "mongodb.uri": uri,
        "mongodb.db_name": "openprocurement_demo",
        "feed.watermark_seconds": str(args.watermark),
        "feed.order": args.order,
        "feed.sequencer": "thread",
        "demo.write_delay_ms": args.write_delay,
        "demo.both_orders": "true",
    }


def status_line(elapsed: float, writer: Any, sequencer: Any, registry: Any = None) -> str:
    """The periodic status: patches written, the sequencer's progress and
    each feed's verdict with its measured lag (the health view's figures)."""
    parts = [f"[{elapsed:6.0f} s]"]
    if registry is not None:
        from ..health import health_report, verdict_line

        parts.append("health: " + verdict_line(health_report(registry)))
    if writer is not None:
        parts.append(f"{writer.stats.patches} patches written")
    if sequencer is not None:
        for follower in sequencer.followers:
            stats = follower.stats
            delay = stats.delay_summary()["median"]
            parts.append(
                f"sequencer: {stats.events} events, checkpoint "
                + (f"{time.time() - stats.checkpoint.time:.0f} s old" if stats.checkpoint else "none yet")
                + (f", commit-to-checkpoint median {delay:.0f} ms" if delay is not None else "")
            )
    return parts[0] + " " + "; ".join(parts[1:])


def _interrupt(signum: int, frame: Any) -> None:
    """SIGTERM ends the process the way Ctrl-C does: through ``finally``."""
    raise KeyboardInterrupt


def run(args: argparse.Namespace) -> int:
    from ..demo.load import PatchWriter, create_tenders
    from ..demo.server import DemoServer

    signal.signal(signal.SIGTERM, _interrupt)
    print("Starting the embedded database and the demo API...", file=sys.stderr)
    try:
        server = DemoServer(_settings(args), host=args.host, port=args.port)
    except ConfigurationError as error:
        raise CommandError(str(error)) from None
    except OSError as error:
        raise CommandError(f"cannot listen on {args.host}:{args.port}: {error}") from None
    writer = None
    try:
        server.start()
        api = server.api_url
        sequencer = server.registry.feed_sequencer
        if sequencer is not None:
            sequencer.wait_ready(timeout=30)
        other = "watermark" if args.order == "commit" else "commit"
        print(
            f"\nDemo API:  {api}/tenders  (POST to create, PATCH {{id}} to change)\n"
            f"Live feed ({args.order} order): {api}/tenders?descending=1\n"
            f"Same tenders ({other} order): {api}/tenders-{other}?descending=1\n"
            f"Health: {server.url}{server.registry.feed_settings.health_path}\n"
            f"Watermark: {args.watermark:g} s; background writer: {args.rate:g} patches/s\n"
            "Press Ctrl-C to stop.\n",
            flush=True,
        )
        existing = server.registry.feed_store.collection("tenders").estimated_document_count()
        if existing < args.tenders:
            create_tenders(api, args.tenders - existing)
        ids = [doc["_id"] for doc in server.registry.feed_store.collection("tenders").find({}, {"_id": 1})]
        if args.rate > 0:
            writer = PatchWriter(api, ids, rate=args.rate, name="background-writer")
            writer.start()
        started = time.monotonic()
        stop = threading.Event()
        while not stop.wait(args.status_every):
            print(status_line(time.monotonic() - started, writer, sequencer, server.registry),
                  file=sys.stderr)
    except KeyboardInterrupt:
        print("\nStopping...", file=sys.stderr)
    finally:
        if writer is not None:
            writer.stop()
            writer.join(timeout=5)
        server.close()
    print("Stopped: HTTP server and database are down.", file=sys.stderr)
    return 0
