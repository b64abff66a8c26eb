"""``openprocurement-feed race``: reproduce the lost-document race and show
that the watermark and the commit order close it.

Runs the same write load three times (W = 0, W = 1 and commit order by
default), each on a fresh
embedded database behind the demo API on 127.0.0.1: writer threads patch
small and large tenders over HTTP, writes commit a few milliseconds after
their stamp (--write-delay), a detector checks the feed for documents that
appear inside an already-served window, and two crawlers follow the feed
(one polling, one long-polling: feed=longpoll) and must each end up with
every tender's final version. One table compares the runs.

--plot FILE draws the race as the runs recorded it (SVG or PNG by the
extension; the ``plot`` extra): the first anomaly the detector caught, and
a window of the same length under each other run.

--hot runs the hot-documents scenario instead: 30 tenders patched at 160/s
aimed at (writes commit at once), and per run the longest time an
acknowledged change stayed invisible to the crawler.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from pymongo.errors import PyMongoError
from pyramid.exceptions import ConfigurationError

from ..cli import CommandError
from .options import (
    MONGODB_URI,
    WRITE_DELAY,
    Flag,
    add_command,
    non_negative_float,
    non_negative_int,
    positive_float,
    positive_int,
    watermark_seconds,
)

#: The longest ``--longpoll``: the default ``feed.longpoll_max_seconds``.
MAX_LONGPOLL = 55.0
#: The line in ``openprocurement-feed --help``.
HELP = "reproduce the lost-document race under load, with and without the watermark"
#: The command's flags, shared ones from :mod:`.options` first where they apply.
FLAGS = (
    Flag(
        "--duration",
        type=positive_float,
        default=20.0,
        metavar="S",
        help="seconds of write load per run (default: %(default)s)",
    ),
    Flag(
        "--watermark",
        type=watermark_seconds,
        nargs="*",
        default=[0.0, 1.0],
        metavar="W",
        help="watermark values in seconds, one run each; none for none (default: 0 1)",
    ),
    Flag(
        "--commit",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also run in commit order, with an in-process sequencer (default: yes)",
    ),
    Flag(
        "--sequencer",
        choices=("process", "thread"),
        default="process",
        help="where the commit run's sequencer runs: its own worker process, as in "
        "production, or a thread of the API process (default: %(default)s)",
    ),
    Flag(
        "--hot",
        action="store_true",
        help="the hot-documents scenario: --small 30 --large 0 --rate 160 unless given",
    ),
    Flag("--writers", type=positive_int, default=8, metavar="N", help="writer threads (default: %(default)s)"),
    Flag(
        "--rate",
        type=non_negative_float,
        default=None,
        metavar="R",
        help="total patches per second aimed at, 0 for as fast as possible (default: 72, with --hot 160)",
    ),
    Flag(
        "--small",
        type=non_negative_int,
        default=None,
        metavar="N",
        help="small tenders (1 item) (default: 70, with --hot 30)",
    ),
    Flag(
        "--large",
        type=non_negative_int,
        default=None,
        metavar="N",
        help="large tenders (10 items, long texts) (default: 70, with --hot 0)",
    ),
    WRITE_DELAY.but(
        default=None,
        help="ms each write stays open after its stamp: 0, 20 or a range (default: 5-40, with --hot 0)",
    ),
    Flag(
        "--check-wait",
        type=positive_float,
        default=0.2,
        metavar="S",
        help="seconds between a detector's snapshot and its re-fetch (default: %(default)s)",
    ),
    Flag(
        "--settle",
        type=non_negative_float,
        default=2.0,
        metavar="S",
        help="seconds the crawler keeps polling after the writers stop, on top of W (default: %(default)s)",
    ),
    Flag(
        "--longpoll",
        type=non_negative_float,
        default=10.0,
        metavar="S",
        help="seconds a second crawler, beside the polling one, asks the server to hold each request at the "
        "head (feed=longpoll); 0 for no long-poll crawler (default: %(default)s)",
    ),
    Flag("--seed", type=int, default=None, help="seed of the random load"),
    MONGODB_URI.but(help="use this MongoDB (a database per run, dropped after) instead of the embedded one"),
    Flag("--json", action="store_true", help="print a JSON list (one object per run) instead of the table"),
    Flag(
        "--plot",
        default=None,
        metavar="FILE",
        help="also draw the race timeline of the runs into FILE (.svg or .png; needs the 'plot' extra)",
    ),
)


def add_parser(subparsers: Any) -> None:
    """Register ``race`` and its flags."""
    add_command(subparsers, "race", run, __doc__, help=HELP, flags=FLAGS)


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    from ..embedded.server import EmbeddedServerError
    from ..race.experiment import RaceConfig, run_experiment
    from ..race.report import race_json, race_table

    base = RaceConfig.hot_scenario() if args.hot else RaceConfig()
    small = base.small if args.small is None else args.small
    large = base.large if args.large is None else args.large
    rate = base.rate if args.rate is None else args.rate
    write_delay = base.write_delay if args.write_delay is None else args.write_delay
    if args.longpoll > MAX_LONGPOLL:
        args.parser.error(f"--longpoll: at most {MAX_LONGPOLL:g} s (the demo's feed.longpoll_max_seconds)")
    if small + large < 1:
        args.parser.error("--small and --large: at least one tender is needed")
    if args.plot is not None:
        _check_plot(args)
    if not getattr(args, "verbose", False):
        # A burst of requests briefly queues in waitress: expected under load.
        logging.getLogger("waitress.queue").setLevel(logging.ERROR)
    config = RaceConfig(
        duration=args.duration,
        writers=args.writers,
        rate=rate,
        small=small,
        large=large,
        write_delay=write_delay,
        watermarks=tuple(args.watermark),
        commit=args.commit,
        hot=args.hot,
        sequencer=args.sequencer,
        check_wait=args.check_wait,
        settle=args.settle,
        longpoll=args.longpoll,
        mongodb_uri=args.mongodb_uri,
        seed=args.seed,
    )
    from requests import RequestException  # the client extra: imported when the command runs

    try:
        results = run_experiment(config, _progress)
    except (ConfigurationError, EmbeddedServerError) as error:
        raise CommandError(str(error).splitlines()[0]) from None
    except (PyMongoError, RequestException) as error:
        raise CommandError(f"the experiment failed: {type(error).__name__}: {error}") from None
    if args.json:
        print(race_json(results))
    else:
        print(race_table(results))
    if args.plot is not None:
        _plot(results, args.plot)
    return 0


def _check_plot(args: argparse.Namespace) -> None:
    """Refuse a bad ``--plot`` before the runs: a wrong extension, or no
    matplotlib (the ``plot`` extra)."""
    from ..plots import PlotExtraMissing, image_format, pyplot

    try:
        image_format(args.plot)
    except ValueError as error:
        args.parser.error(f"--plot: {error}")
    try:
        pyplot()
    except PlotExtraMissing as error:
        raise CommandError(str(error)) from None


def _plot(results: list[Any], path: str) -> None:
    from ..plots.race import plot_race

    traces = [result.trace for result in results if result.trace is not None]
    try:
        lines = plot_race(traces, path)
    except OSError as error:
        raise CommandError(f"cannot write the picture {path!r}: {error.strerror or error}") from None
    print(f"Race timeline written to {path}:", file=sys.stderr)
    for line in lines:
        print(f"  {line}", file=sys.stderr)
