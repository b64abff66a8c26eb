"""``openprocurement-feed sequence CONFIG.ini``: the sequencer of commit-ordered feeds.

Loads the application from CONFIG.ini (its ``[app:main]`` section, as
``pserve`` does) to learn its commit-ordered feeds, then follows the change
stream of each of their collections, giving every committed change its
position (SPEC D). With --observe it also follows the watermark-ordered
feeds' collections without writing anything but figures: every write's
start-to-commit lag, published for the health view. Any number of sequencers may run at once. A progress line
every few seconds shows events/s, entries stamped and the checkpoint's lag;
SIGINT or SIGTERM stop it after the current batch, its resume token and
checkpoint saved, with a summary line.

The application's own in-process sequencer (``feed.sequencer = thread``) is
turned off while the command loads it. Exit status: 0 after a stop, 2 for a
configuration or database error.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
import time
from typing import Any

from ..cli import CommandError
from .options import RUN_FOR, Flag, add_command, positive_float, positive_int


def ini_file(value: str) -> str:
    """An existing, readable ini file (``file.ini`` or ``file.ini#name``)."""
    path = value.split("#", 1)[0]
    if not os.path.isfile(path) or not os.access(path, os.R_OK):
        raise argparse.ArgumentTypeError(f"no readable ini file at {path!r}")
    return value


#: The line in ``openprocurement-feed --help``.
HELP = "follow the change streams of commit-ordered feeds and publish their positions"
#: The command's flags, shared ones from :mod:`.options` first where they apply.
FLAGS = (
    Flag(
        "config",
        type=ini_file,
        metavar="CONFIG.ini",
        help="the application's ini file (e.g. production.ini)",
    ),
    Flag(
        "--progress-every",
        type=positive_float,
        default=5.0,
        metavar="S",
        help="seconds between two progress lines (default: %(default)s)",
    ),
    Flag(
        "--batch-size",
        type=positive_int,
        default=1000,
        metavar="N",
        help="most change events written in one bulk write (default: %(default)s)",
    ),
    Flag(
        "--observe",
        action="store_true",
        help="also follow the watermark-ordered feeds' collections, observe-only: "
        "measure each write's start-to-commit lag for the health view",
    ),
    RUN_FOR,
)


def add_parser(subparsers: Any) -> None:
    """Register ``sequence`` and its flags."""
    add_command(subparsers, "sequence", run, __doc__, help=HELP, flags=FLAGS)


def load_registry(config: str) -> Any:
    """The registry of the application in ``config``, its own sequencer off."""
    from pyramid.paster import get_app, setup_logging

    previous = os.environ.get("FEED_SEQUENCER")
    os.environ["FEED_SEQUENCER"] = "off"
    try:
        with contextlib.suppress(Exception):  # an ini without logging sections is fine
            setup_logging(config)
        app = get_app(config)
    finally:
        if previous is None:
            os.environ.pop("FEED_SEQUENCER", None)
        else:
            os.environ["FEED_SEQUENCER"] = previous
    return app.registry


def _lag(stats: Any) -> str:
    if stats.checkpoint is None:
        return "no checkpoint yet"
    age = max(0.0, time.time() - stats.checkpoint.time)
    delay = stats.delay_summary()
    text = f"checkpoint {stats.checkpoint.time}.{stats.checkpoint.inc:010d} ({age:.0f} s old)"
    if delay["median"] is not None:
        text += f", commit-to-checkpoint median {delay['median']:.0f} ms, max {delay['max']:.0f} ms"
    return text


def progress_line(elapsed: float, followers: list[Any], previous: dict[str, int]) -> str:
    """One line per interval: events/s, stamped entries and lag per collection."""
    parts = []
    for follower in followers:
        stats = follower.stats
        rate = (stats.events - previous.get(follower.name, 0)) / max(elapsed, 1e-9)
        previous[follower.name] = stats.events
        lag = follower.window.summary()
        text = f"{follower.name}: {rate:.1f} events/s"
        if not follower.observe:
            text += f", {stats.stamped} stamped, {_lag(stats)}"
        if lag["count"]:
            text += f", start-to-commit lag p50 {lag['p50']:.0f} / max {lag['max']:.0f} ms"
        parts.append(text)
    return "; ".join(parts)


def summary_line(seconds: float, followers: list[Any]) -> str:
    """The closing line: totals per collection."""
    parts = []
    for follower in followers:
        stats = follower.stats
        parts.append(
            f"{follower.name}: {stats.events} events in {stats.batches} batches, "
            f"{stats.stamped} stamped, {stats.backfilled} backfilled, "
            f"{stats.recovered} re-stamped by recovery, {_lag(stats)}"
        )
    return f"Sequencer stopped after {seconds:.1f} s. " + "; ".join(parts)


def run(args: argparse.Namespace) -> int:
    from pymongo.errors import PyMongoError
    from pyramid.exceptions import ConfigurationError

    from .. import shutdown
    from ..commit.plan import feed_plan
    from ..commit.sequencer import Sequencer
    from ..store.state import feed_state, role_store

    try:
        registry = load_registry(args.config)
    except ConfigurationError as error:
        raise CommandError(str(error)) from None
    except (LookupError, ValueError, ImportError) as error:
        raise CommandError(f"{args.config}: cannot load the application: {error}") from None
    plan = feed_plan(feed_state(registry))
    if not args.observe:
        plan = plan.sequencing_only()
    if plan.empty:
        shutdown(registry)
        raise CommandError(
            f"{args.config}: the application has no commit-ordered feed "
            "(set feed.order = commit, or add_feed(..., order='commit')); "
            "--observe follows watermark feeds to measure their lag"
        )
    stopping = threading.Event()

    def stop(signum: int, frame: Any) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    state = feed_state(registry)
    database = role_store(registry, state.settings.sequencer_app_name).db
    sequencer = Sequencer.from_plan(
        database,
        plan,
        batch_size=args.batch_size,
        lag_window_seconds=state.settings.lag_window_seconds,
        metrics=state.metrics,
    )
    collections = plan.collections
    names = ", ".join(sorted(collections) + [f"{name} (observed)" for name in plan.observed if name not in collections])
    print(f"Sequencing {names} of database {database.name}", file=sys.stderr, flush=True)
    started = time.monotonic()
    previous: dict[str, int] = {}
    try:
        sequencer.start()
        last = started
        deadline = started + args.run_for if args.run_for else None
        while not stopping.is_set():
            wait = args.progress_every
            if deadline is not None:
                wait = min(wait, max(0.0, deadline - time.monotonic()))
            stopping.wait(wait)
            if sequencer.errors:
                break
            now = time.monotonic()
            if now - last >= args.progress_every or stopping.is_set():
                print(
                    f"[{now - started:6.0f} s] " + progress_line(now - last, sequencer.followers, previous),
                    file=sys.stderr,
                    flush=True,
                )
                last = now
            if deadline is not None and now >= deadline:
                break
    except PyMongoError as error:
        raise CommandError(f"database error: {error}") from None
    finally:
        sequencer.stop()
        print(summary_line(time.monotonic() - started, sequencer.followers), file=sys.stderr, flush=True)
        shutdown(registry)
    if sequencer.errors:
        raise CommandError(f"the sequencer stopped: {sequencer.errors[0]}")
    return 0
