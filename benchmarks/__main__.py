"""``python -m benchmarks [PART] [options]``: print the figures of the feed.

Parts: ``cost`` (what the extension adds to a feed page), ``plans`` (the
query plan of every feed query shape), ``codec`` (offset parse/compose
throughput), ``sync`` (a full sync by the reference crawler), ``sequencer``
(the commit-ordered feed: sequencer throughput and catch-up, commit-to-visible
delay beside the watermark's, a commit page's cost beside a watermark page's),
``metrics`` (a feed page with the Prometheus metrics on against off),
``orders`` (the seed's load over HTTP in both orders side by side on one
database server: patches/s, the database's CPU per patch, feed delay, hot
documents), ``load`` (sustained load: crawlers and writers at once), ``demo-rate`` (the
patch rate the demo API reaches with real-shaped documents), ``restricted``
(a page's render time with the restricted-object rule against without),
``longpoll`` (``feed=longpoll``: PATCH-to-crawler delay beside polling
crawlers, and the database's CPU with crawlers waiting at the head),
``host`` (the feed page's CPU against an upstream-shaped host's own listing
view, the feed in the host route's place), ``save`` (what one ``save_data``
costs the database in and outside a transaction, by collection size),
``roles`` (the connections and the database's CPU per change of a client per
role: the sequencer on its own client against the store's), ``recovery``
(how soon a watcher follows again after a fault that marks the server
unknown, its client's monitor polling against streaming), ``reconcile-client``
(a crawler's check with k differences against a full crawl's bytes, and
``verify`` / ``--repair`` / ``verify`` on a 100,000-tender feed in each
order; ``--plot FILE`` draws the figure), ``reconcile`` (the reconcile
endpoint's side: an in-sync check at 10,000 and 100,000 tenders in one round
trip, the documents the database returns for it, the plans, its database CPU
beside 10 feed pages', and the aggregates' cost per patch in both orders),
``embedded-leak`` (the embedded server's RSS per 1,000 transactions and per
1,000 change-stream reads, with the mend of the WiredTiger binding's leak
and without), ``mirror`` (catching up into SQLite against ``sync --out``, and an in-sync
check of an SQLite mirror, at ``--mirror-sizes``), ``soak`` (the
production shape for an hour under the seed's load: memory, descriptors,
connections, collection sizes, delays and their slopes; ``make soak``).
Without a part,
``cost``, ``plans``, ``codec``, ``sync``, ``sequencer``, ``metrics``, ``orders`` and ``host`` run
(``make bench``); ``make load`` runs ``load``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from openprocurement_feed.commands.options import non_negative_float, positive_float, positive_int

#: The feed's orders, as the reconcile parts name them.
ORDERS = ("watermark", "commit")


def order_list(value: str) -> tuple[str, ...]:
    """A comma-separated list of orders (maybe empty)."""
    orders = tuple(part.strip() for part in value.split(",") if part.strip())
    unknown = [order for order in orders if order not in ORDERS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown order {unknown[0]!r}: give {' or '.join(ORDERS)}, comma-separated")
    return orders


PARTS = ("cost", "plans", "codec", "sync", "sequencer", "metrics", "orders", "host")


def document_count(value: str) -> int:
    """A number of sample documents, 10-20000 (the embedded server sorts in memory)."""
    number = positive_int(value)
    if not 10 <= number <= 20_000:
        raise argparse.ArgumentTypeError(f"expected 10 to 20000 documents, got {value!r}")
    return number


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "part",
        nargs="?",
        choices=(
            "all",
            *PARTS,
            "load",
            "demo-rate",
            "restricted",
            "longpoll",
            "save",
            "roles",
            "recovery",
            "reconcile-client",
            "reconcile",
            "embedded-leak",
            "mirror",
            "soak",
        ),
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
        "--cache-size", default="256M", metavar="SIZE", help="the embedded server's cache (default: %(default)s)"
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


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    parser.add_argument(
        "--mirror-sizes",
        type=lambda value: tuple(positive_int(part) for part in value.split(",")),
        default=(10_000, 100_000),
        help="mirror: the feed sizes, comma-separated (default: 10000,100000)",
    )
    args = parser.parse_args(argv)
    if args.plot is not None:
        from openprocurement_feed.plots import PlotExtraMissing, pyplot

        try:
            pyplot()
        except PlotExtraMissing as error:
            print(f"python -m benchmarks: {error}", file=sys.stderr)
            return 2
    if args.part == "mirror":
        from . import mirror

        mirror.run(args.mirror_sizes)
        return 0
    if args.part == "soak":
        from . import soak

        return soak.run(args)
    if args.part == "load":
        from . import load

        return load.run(args.duration, args.crawlers, args.writers, args.tenders, args.write_rate)
    if args.part == "demo-rate":
        from . import demo_rate

        demo_rate.run(rate=args.patch_rate, seconds=args.write_seconds)
        return 0
    if args.part == "longpoll":
        from . import longpoll

        longpoll.run(changes=args.changes, wait_seconds=args.wait_seconds)
        return 0
    if args.part == "roles":
        from . import roles

        roles.run(rounds=args.rounds + 1)
        return 0
    if args.part == "recovery":
        from . import recovery

        recovery.run(rounds=args.recovery_rounds, hold=args.recovery_hold)
        return 0
    if args.part == "save":
        from . import save

        save.run()
        return 0
    if args.part == "embedded-leak":
        from . import embedded_leak

        embedded_leak.run()
        return 0
    if args.part == "reconcile":
        from . import reconcile

        reconcile.run(args.reconcile_sizes, args.keeper_seconds, args.keeper_rounds, keeper=args.keeper_rounds > 0)
        if args.table_orders:
            from . import reconcile_client

            print()
            reconcile_client.run(tenders=max(args.reconcile_sizes), orders=args.table_orders, scenario=False)
        return 0
    if args.part == "reconcile-client":
        from . import reconcile_client

        reconcile_client.run(
            tenders=args.reconcile_tenders,
            orders=args.reconcile_orders,
            scenario=not args.no_scenario,
            plot=args.plot,
            save=args.reconcile_save,
            load=args.reconcile_load,
            aggregates=not args.reconcile_no_aggregates,
        )
        return 0
    if args.part == "restricted":
        from . import restricted_cost

        restricted_cost.run()
        return 0
    parts = PARTS if args.part == "all" else (args.part,)
    for part in parts:
        started = time.monotonic()
        print(f"== {part} ==", flush=True)
        if part == "cost":
            from . import feed_cost

            feed_cost.run(
                docs=args.docs, repeat=args.repeat, profile=args.profile, iterations=args.iterations, rounds=args.rounds
            )
        elif part == "plans":
            from . import plans

            plans.run(docs=args.docs)
        elif part == "sync":
            from . import sync

            sync.run(tenders=args.docs)
        elif part == "sequencer":
            from . import sequencer

            sequencer.run(
                seconds=args.write_seconds,
                catch_up_count=args.catch_up,
                rate=args.delay_rate,
                docs=args.docs,
                repeat=args.repeat,
            )
        elif part == "orders":
            from . import orders

            orders.run(
                seconds=args.order_seconds,
                rounds=args.order_rounds,
                hot_rounds=0 if args.no_hot else args.hot_rounds,
                docs=args.docs,
                plot=args.plot,
            )
        elif part == "host":
            from . import host_listing

            host_listing.run(docs=args.docs)
        elif part == "metrics":
            from . import metrics_cost

            metrics_cost.run(docs=args.docs, repeat=args.repeat)
        else:
            from . import codec

            codec.run()
        print(f"({part}: {time.monotonic() - started:.0f} s)\n", flush=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("Interrupted.", file=sys.stderr)
        sys.exit(130)
