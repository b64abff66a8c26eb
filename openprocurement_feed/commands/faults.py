"""``openprocurement-feed faults``: the fault matrix.

Starts the embedded database with test commands (or uses --mongodb-uri, a
database that accepts configureFailPoint), serves the demo app on 127.0.0.1
in each order (feed.sequencer = thread) and runs the seed's load: writers
whose transactions stay open a few milliseconds after their stamp (creates
carry an Idempotency-Key, retried with it), a crawler following next_page,
a long-poll crawler and a read probe of the feed, an object and the health
view. Each cell arms one failCommand fault aimed by appName at one client
(the web app's, the sequencer's, the long-poll notifier's) for --hold
seconds (and up to --strike-timeout more until it struck once), transient
(times: 3) or sustained (alwaysOn), clears it, and prints a row: how many
commands the fault failed (struck: counted by the driver's command
monitoring on the client aimed at), the answers clients got by status,
acknowledged writes lost, duplicates from a retried create, the longest
time reads went unanswered, the time to recover after the
fault ended, the worst health verdict seen.

The exit status is 1 when a cell broke the promise (a 5xx other than 503,
an answer without Retry-After, a lost or duplicated write, reads not
answered within 10 s of the fault's end) or missed: its fault never struck
(no command of its client failed by it), so it proved nothing. A commit
delayed past W in the watermark order loses writes by design: that cell is
reported as the expected loss, and broken only if the health verdict did
not turn violated.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from typing import Any

from ..cli import CommandError
from .options import MONGODB_URI, Flag, add_command, non_negative_float, positive_float, positive_int

HELP = "run the fault matrix: database failures aimed at each client, in both orders"
FLAGS = (
    Flag(
        "--order",
        choices=("watermark", "commit", "both"),
        default="both",
        help="the feed order(s) to run (default: %(default)s)",
    ),
    Flag(
        "--only",
        action="append",
        default=[],
        metavar="WORDS",
        help="run only the cells whose name has every word, e.g. 'election web' or 'sequencer:getMore'; "
        "repeat for more (see --list)",
    ),
    Flag("--fast", action="store_true", help="each kind of fault once, on its most exposed target"),
    Flag("--list", action="store_true", help="print the cells' names and exit"),
    Flag(
        "--hold",
        type=positive_float,
        default=2.0,
        metavar="S",
        help="seconds each fault stays armed (default: %(default)g)",
    ),
    Flag(
        "--strike-timeout",
        type=non_negative_float,
        default=15.0,
        metavar="S",
        help="seconds a fault that has not struck after --hold stays armed, waiting for its client to send "
        "the command (0: never; default: %(default)g)",
    ),
    Flag(
        "--settle",
        type=non_negative_float,
        default=10.0,
        metavar="S",
        help="seconds the crawlers get to catch up after a cell, on top of W: a change not shown by then "
        "counts as lost (default: %(default)g)",
    ),
    Flag(
        "--watermark",
        type=positive_float,
        default=1.0,
        metavar="W",
        help="the watermark order's W in seconds (default: %(default)g)",
    ),
    Flag("--writers", type=positive_int, default=4, metavar="N", help="writer threads (default: %(default)s)"),
    MONGODB_URI.but(help="a database with test commands enabled instead of the embedded one"),
    Flag("--json", action="store_true", help="print JSON instead of the table"),
)


def add_parser(subparsers: Any) -> None:
    """Register ``faults`` and its flags."""
    add_command(subparsers, "faults", run, __doc__, help=HELP, flags=FLAGS)


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    from ..faults.cells import fast_matrix, full_matrix, select

    cells = select(fast_matrix() if args.fast else full_matrix(), args.only)
    if args.list:
        print("\n".join(cell.name for cell in cells))
        return 0
    if not cells:
        args.parser.error("--only: no cell matches (see --list)")
    from pymongo.errors import PyMongoError
    from pyramid.exceptions import ConfigurationError
    from requests import RequestException

    from ..embedded.server import EmbeddedServerError
    from ..faults.failpoint import FailPointError
    from ..faults.report import matrix_json, print_table, problems
    from ..faults.run import ORDERS, MatrixConfig, run_matrix

    root = logging.getLogger()
    level = root.level
    if not args.verbose:
        # Each fault is logged by the app, the sequencer and the driver as it
        # happens: the rows say what came of it (the level is restored after
        # the run: a caller in the same process keeps its logging).
        root.setLevel(logging.CRITICAL)
    config = MatrixConfig(
        cells=tuple(cells),
        orders=ORDERS if args.order == "both" else (args.order,),
        watermark=args.watermark,
        hold=args.hold,
        strike_timeout=args.strike_timeout,
        settle=args.settle,
        writers=args.writers,
        uri=args.mongodb_uri,
    )
    started = time.monotonic()
    try:
        results = run_matrix(config, _progress)
    except (ConfigurationError, EmbeddedServerError, FailPointError) as error:
        raise CommandError(str(error).splitlines()[0]) from None
    except (PyMongoError, RequestException) as error:
        raise CommandError(f"the matrix failed: {type(error).__name__}: {error}") from None
    finally:
        root.setLevel(level)
    seconds = time.monotonic() - started
    if args.json:
        print(matrix_json(results, seconds))
    else:
        print_table(results, sys.stdout)
        print(f"{len(results)} cells in {seconds:.0f} s", file=sys.stdout)
    broken = problems(results)
    for line in broken:
        print(line, file=sys.stderr)
    return 1 if broken else 0
