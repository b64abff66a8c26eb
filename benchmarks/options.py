"""The options of ``python -m benchmarks``: the common ones, then a group
per benchmark that has its own (a part's name in :mod:`benchmarks.registry`
is one of the choices of the first argument)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from openprocurement_feed.commands.options import non_negative_float, non_negative_int, positive_float, positive_int
from openprocurement_feed.settings import FeedSettings

from .registry import PARTS
from .scale.cli import add_scale_options

#: The feed's orders, as the reconcile parts name them.
ORDERS = ("watermark", "commit")


def order_list(value: str) -> tuple[str, ...]:
    """A comma-separated list of orders (maybe empty)."""
    orders = tuple(part.strip() for part in value.split(",") if part.strip())
    unknown = [order for order in orders if order not in ORDERS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown order {unknown[0]!r}: give {' or '.join(ORDERS)}, comma-separated")
    return orders


def document_count(value: str) -> int:
    """A number of sample documents, 10-20000 (the embedded server sorts in memory)."""
    number = positive_int(value)
    if not 10 <= number <= 20_000:
        raise argparse.ArgumentTypeError(f"expected 10 to 20000 documents, got {value!r}")
    return number


def build_parser(description: str | None = None) -> argparse.ArgumentParser:
    """Every benchmark's options; ``description`` heads ``--help`` (the
    parts, told in ``benchmarks/__main__.py``'s docstring)."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description=description,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "part",
        nargs="?",
        choices=("all", *(part.name for part in PARTS)),
        default="all",
        help="what to measure (default: every part but load)",
    )
    parser.add_argument(
        "--docs",
        type=document_count,
        default=3000,
        help="sample tenders for cost, plans, sync, metrics and the sequencer's page cost (default: %(default)s)",
    )
    parser.add_argument(
        "--repeat",
        type=positive_int,
        default=30,
        help="timed runs per way and page size for cost, metrics (batches) and "
        "the sequencer's page cost (default: %(default)s)",
    )
    parser.add_argument("--profile", action="store_true", help="cost: also print a cProfile of the in-process requests")
    parser.add_argument(
        "--iterations",
        type=positive_int,
        default=20,
        help="cost: calls per CPU loop (total process CPU / count) (default: %(default)s)",
    )
    parser.add_argument(
        "--rounds",
        type=positive_int,
        default=3,
        help="cost: interleaved CPU loops per way, the median is reported (default: %(default)s)",
    )
    sequencer = parser.add_argument_group("sequencer")
    sequencer.add_argument(
        "--write-seconds",
        type=positive_float,
        default=6.0,
        help="seconds of writes for the throughput and delay figures (default: %(default)s)",
    )
    sequencer.add_argument(
        "--catch-up",
        type=positive_int,
        default=2000,
        metavar="N",
        help="tenders written while the sequencer is stopped (default: %(default)s)",
    )
    sequencer.add_argument(
        "--delay-rate",
        type=positive_float,
        default=70.0,
        metavar="RATE",
        help="patches per second of the delay figure (default: %(default)s)",
    )
    orders = parser.add_argument_group("orders")
    orders.add_argument(
        "--order-seconds",
        type=positive_float,
        default=20.0,
        metavar="S",
        help="seconds of writes per run (default: %(default)s)",
    )
    orders.add_argument(
        "--order-rounds",
        type=positive_int,
        default=2,
        metavar="N",
        help="alternating runs of each order (default: %(default)s)",
    )
    orders.add_argument(
        "--hot-rounds",
        type=positive_int,
        default=2,
        metavar="N",
        help="alternating hot-documents runs of each order (default: %(default)s)",
    )
    orders.add_argument("--no-hot", action="store_true", help="leave out the hot-documents runs")
    orders.add_argument(
        "--plot",
        default=None,
        metavar="DIR",
        help="also draw the charts (orders-delay.svg, orders-cpu.svg, orders-hot.svg) into DIR; the runs then "
        "have a long-poll crawler beside the polling one (needs the 'plot' extra); soak: the figure's FILE "
        "(.svg or .png)",
    )
    reconcile_client = parser.add_argument_group("reconcile-client")
    reconcile_client.add_argument(
        "--reconcile-tenders",
        type=positive_int,
        default=100_000,
        metavar="N",
        help="tenders of the feed a crawler's copy is checked against (default: %(default)s)",
    )
    reconcile_client.add_argument(
        "--reconcile-orders",
        type=order_list,
        default=("watermark", "commit"),
        metavar="LIST",
        help="the orders, comma-separated (default: watermark,commit)",
    )
    reconcile_client.add_argument(
        "--reconcile-save",
        default=None,
        metavar="FILE",
        help="append each order's results to FILE (JSON lines) as soon as it is done",
    )
    reconcile_client.add_argument(
        "--reconcile-load",
        action="append",
        default=[],
        metavar="FILE",
        help="report (and --plot) the results saved in FILE instead of running (repeatable)",
    )
    reconcile_client.add_argument(
        "--reconcile-no-aggregates",
        action="store_true",
        help="serve the feed with feed.reconcile_aggregates = false (every round reads the feed's records; "
        "the client's figures are the same, and the run does not wait for the aggregates' build)",
    )
    reconcile_client.add_argument(
        "--no-scenario",
        action="store_true",
        help="only the cost table: leave out verify / --repair / verify on each order",
    )
    reconcile = parser.add_argument_group("reconcile")
    reconcile.add_argument(
        "--reconcile-sizes",
        type=lambda value: tuple(positive_int(part) for part in value.split(",")),
        default=(10_000, 100_000),
        metavar="N,N",
        help="feed sizes of the in-sync check (default: 10000,100000)",
    )
    reconcile.add_argument(
        "--table-orders",
        type=order_list,
        default=("watermark",),
        metavar="LIST",
        help="the orders whose k-differences table (reconcile-client's, without its verify / repair scenario) "
        "is printed too, at the largest size; '' for none (default: watermark: the bytes are the same in both)",
    )
    reconcile.add_argument(
        "--keeper-seconds",
        type=positive_float,
        default=20.0,
        metavar="S",
        help="seconds per run of the aggregates' cost under load (default: %(default)s; 0 rounds: none)",
    )
    reconcile.add_argument(
        "--keeper-rounds",
        type=int,
        default=3,
        metavar="N",
        help="rounds of the aggregates' cost, each on and off in both orders (default: %(default)s)",
    )
    recovery = parser.add_argument_group("recovery")
    recovery.add_argument(
        "--recovery-rounds",
        type=positive_int,
        default=4,
        metavar="N",
        help="rounds of each monitoring mode, alternating (default: %(default)s)",
    )
    recovery.add_argument(
        "--recovery-hold",
        type=positive_float,
        default=3.0,
        metavar="S",
        help="seconds the observer's reads fail in each round (default: %(default)s)",
    )
    demo = parser.add_argument_group("demo-rate")
    demo.add_argument(
        "--patch-rate",
        type=positive_float,
        default=60.0,
        metavar="RATE",
        help="patches per second asked of the demo (default: %(default)s; --write-seconds per case)",
    )
    load = parser.add_argument_group("load")
    load.add_argument("--duration", type=positive_float, default=60.0, help="seconds of load (default: %(default)s)")
    load.add_argument("--crawlers", type=positive_int, default=4, help="crawlers (default: %(default)s)")
    load.add_argument("--writers", type=positive_int, default=4, help="writers (default: %(default)s)")
    load.add_argument(
        "--tenders", type=positive_int, default=100, help="tenders created before the load (default: %(default)s)"
    )
    load.add_argument(
        "--write-rate",
        type=non_negative_float,
        default=0.0,
        help="writes per second per writer, 0 = as fast as answered (default: %(default)s)",
    )
    longpoll = parser.add_argument_group("longpoll")
    longpoll.add_argument(
        "--changes", type=positive_int, default=20, help="PATCHes of the delay figure per order (default: %(default)s)"
    )
    longpoll.add_argument(
        "--wait-seconds",
        type=positive_float,
        default=10.0,
        help="seconds each CPU row's crawlers wait at the head (default: %(default)s; the issue's figure: 30)",
    )
    add_soak_options(parser)
    add_scale_options(parser)
    parser.add_argument(
        "--mirror-sizes",
        type=lambda value: tuple(positive_int(part) for part in value.split(",")),
        default=(10_000, 100_000),
        help="mirror: the feed sizes, comma-separated (default: 10000,100000)",
    )
    parser.add_argument(
        "--bad-rows",
        type=non_negative_int,
        default=0,
        metavar="N",
        help="mirror: after each size's catch-up, N rows deleted, N set older and N extra ids written straight "
        "into the SQLite mirror, reported exactly by verify --db --json and repaired (default: 0, none)",
    )
    parser.add_argument(
        "--bad-rows-only",
        action="store_true",
        help="mirror: with --bad-rows, only that (one catch-up by mirror --once; no timed rounds, no table)",
    )
    return parser


def add_soak_options(parser: argparse.ArgumentParser) -> None:
    """The ``soak`` part's options (``make soak``)."""
    soak = parser.add_argument_group("soak")
    soak.add_argument(
        "--minutes",
        type=positive_float,
        default=float(os.environ.get("SOAK_MINUTES") or 60),
        help="minutes of load (default: SOAK_MINUTES or 60; now %(default)s)",
    )
    soak.add_argument(
        "--warm-up",
        type=non_negative_float,
        default=10.0,
        metavar="MINUTES",
        help="minutes left out of the slopes (default: %(default)s)",
    )
    soak.add_argument(
        "--interval", type=positive_float, default=60.0, metavar="S", help="seconds between two samples (default: 60)"
    )
    soak.add_argument("--rate", type=positive_float, default=72.0, help="patches/s asked (default: the seed's, 72)")
    soak.add_argument(
        "--create-rate",
        type=non_negative_float,
        default=0.2,
        metavar="RATE",
        help="creates/s with an Idempotency-Key (default: %(default)s)",
    )
    soak.add_argument("--workers", type=positive_int, default=3, help="gunicorn workers (default: %(default)s)")
    soak.add_argument(
        "--max-requests",
        type=int,
        default=0,
        metavar="N",
        help="gunicorn's max_requests: restart a worker after N requests (default: 0, never: a leak must show)",
    )
    soak.add_argument(
        "--oplog-max-entries",
        type=positive_int,
        default=50_000,
        metavar="N",
        help="the embedded server's oplog bound, entries (default: %(default)s)",
    )
    soak.add_argument(
        "--oplog-retention-seconds",
        type=positive_int,
        default=3600,
        metavar="S",
        help="the embedded server's oplog retention (default: %(default)s)",
    )
    soak.add_argument(
        "--cache-size",
        default=FeedSettings.embedded_cache_size,
        metavar="SIZE",
        help="the embedded server's cache (default: %(default)s, the package's mongodb.embedded_cache_size)",
    )
    soak.add_argument("--workdir", type=Path, default=None, help="soak: keep the logs and samples here")
    soak.add_argument("--keep", action="store_true", help="soak: keep the temporary folder")
    soak.add_argument(
        "--from-samples",
        type=Path,
        default=None,
        metavar="FILE",
        help="soak: judge and draw an earlier run's samples.jsonl instead of running",
    )
