"""``openprocurement-feed check URL``: look for lost-document anomalies in a live feed.

Read-only. Each check takes the newest page of the feed (descending, with
public_modified), waits, reads forward again from that page's oldest item and
reports every document that appeared inside the window already served: a
crawler that had reached the window's newest item would never see it.

Works against any openprocurement-style feed URL, e.g.
https://public-api.prozorro.gov.ua/api/2.5/tenders (add ?mode=test or
?mode=_all_ to check those feeds). Exit status: 0 no anomaly, 1 anomalies
found, 2 the feed could not be read.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from ..cli import CommandError
from .options import HTTP_TIMEOUT, INTERVAL, MODE, PAGE_LIMIT, URL, Flag, add_command, positive_float, positive_int

#: Checks made when neither --checks nor --duration is given.
DEFAULT_CHECKS = 20
#: Seconds between two progress lines on stderr.
PROGRESS_EVERY = 5.0


#: The line in ``openprocurement-feed --help``.
HELP = "check a live feed for documents that appear inside an already-served window"
#: The command's flags, shared ones from :mod:`.options` first where they apply.
FLAGS = (
    URL,
    Flag(
        "--checks",
        type=positive_int,
        default=None,
        metavar="N",
        help=f"stop after N checks (default: {DEFAULT_CHECKS} when --duration is not given)",
    ),
    Flag(
        "--duration",
        type=positive_float,
        default=None,
        metavar="S",
        help="stop after S seconds (with --checks: whichever comes first)",
    ),
    Flag(
        "--wait",
        type=positive_float,
        default=0.5,
        metavar="S",
        help="seconds between a snapshot and its re-fetch (default: %(default)s)",
    ),
    INTERVAL.but(help="seconds between two checks (default: %(default)s)"),
    PAGE_LIMIT.but(help="page size of the snapshot and the re-fetch (default: %(default)s)"),
    MODE.but(help="check the test feed or the feed of everything (default: the URL's, else real objects)"),
    HTTP_TIMEOUT,
)


def add_parser(subparsers: Any) -> None:
    """Register ``check`` and its flags."""
    add_command(subparsers, "check", run, __doc__, help=HELP, flags=FLAGS)


def run(args: argparse.Namespace) -> int:
    from ..race.detector import Detector, DetectorStats
    from ..race.feed import FeedClient, FeedError
    from ..race.report import check_summary, format_anomaly

    checks = args.checks if args.checks or args.duration else DEFAULT_CHECKS
    client = FeedClient(args.url, limit=args.limit, timeout=args.timeout, mode=args.mode)
    detector = Detector(client, wait=args.wait)
    stats = DetectorStats()
    empty = 0
    started = time.monotonic()
    deadline = started + args.duration if args.duration else None
    next_report = started + PROGRESS_EVERY
    print(f"Checking {client.url} ...", file=sys.stderr, flush=True)
    try:
        while True:
            try:
                result = detector.check()
            except FeedError as error:
                raise CommandError(str(error)) from None
            if result.snapshot:
                stats.add(result)
                if result.anomaly:
                    print(format_anomaly(result), flush=True)
            else:
                empty += 1
            made = stats.checks + empty
            now = time.monotonic()
            if (checks and made >= checks) or (deadline and now >= deadline):
                break
            if now >= next_report:
                next_report = now + PROGRESS_EVERY
                print(
                    f"[{now - started:5.1f} s] {stats.checks} checks, {stats.failures} with late arrivals",
                    file=sys.stderr,
                    flush=True,
                )
            pause = args.interval
            if deadline:
                pause = min(pause, max(0.0, deadline - now))
            time.sleep(pause)
    finally:
        client.close()
    print(check_summary(stats, time.monotonic() - started, empty), flush=True)
    return 1 if stats.failures else 0
