"""The production-shaped test's command line: its options, the scenario
(start everything, the faults, the checks), and the exit status."""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from .checks import finish
from .clock import Clock
from .deployment import Failure, Missing
from .faults import check_feed_moves, kill_sequencer, kill_worker, outage
from .report import draw_timeline
from .requirements import find_tools
from .run import Run


def scenario(run: Run) -> list[str]:
    """The whole test: start everything, the faults, the checks."""
    options = run.options
    run.start()
    small, large = run.seed_and_crawl()
    run.start_writers(small, large)
    run.hold(options.steady, "steady, 3 workers and 2 sequencers")
    kill_worker(run)
    run.hold(options.phase, "after the worker's restart")
    kill_sequencer(run)
    killed_at = time.time()
    run.hold(options.phase, "one sequencer")
    check_feed_moves(run, killed_at)
    outage(run)
    run.hold(options.steady, "after the outage")
    return finish(run)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="ops/e2e.py",
        description="The production-shaped end-to-end test (make test-ops): gunicorn workers, two sequencers, "
        "writers, crawlers and a real Prometheus with the shipped alert rules, with faults mid-run.",
    )
    parser.add_argument(
        "--rate", type=float, default=72.0, help="patches per second, all writers (default: the seed's, %(default)s)"
    )
    parser.add_argument("--writers", type=int, default=8, help="writer threads (default: %(default)s)")
    parser.add_argument("--small", type=int, default=70, help="small tenders, 1 item (default: %(default)s)")
    parser.add_argument("--large", type=int, default=70, help="large tenders, 10 items (default: %(default)s)")
    parser.add_argument(
        "--write-delay",
        default="5-40",
        metavar="MS",
        help="demo.write_delay_ms: milliseconds each write stays open after its stamp (default: %(default)s)",
    )
    parser.add_argument("--workers", type=int, default=3, help="gunicorn workers (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the sample documents (default: %(default)s)")
    parser.add_argument("--steady", type=float, default=15.0, help="seconds of load before and after the faults")
    parser.add_argument("--phase", type=float, default=10.0, help="seconds between two faults (default: %(default)s)")
    parser.add_argument(
        "--hold-firing", type=float, default=3.0, help="seconds the outage goes on once the alert fires"
    )
    parser.add_argument(
        "--alert-timeout", type=float, default=120.0, help="seconds to wait for the alert to fire or resolve"
    )
    parser.add_argument("--catch-up", type=float, default=30.0, help="seconds the crawlers get to catch up at the end")
    parser.add_argument(
        "--budget", type=float, default=300.0, help="the whole test's time limit (default: %(default)s)"
    )
    parser.add_argument(
        "--workdir", type=Path, default=None, help="keep the logs and files here (default: a temporary folder)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder even when the test passes")
    parser.add_argument(
        "--plot",
        default=None,
        metavar="FILE",
        help="draw the run's timeline into FILE (.svg or .png): writes/s, the crawler's lag, the checkpoint's "
        "age, each kill -9 and the alert (needs the 'plot' extra)",
    )
    parser.add_argument(
        "--drop-final",
        type=int,
        default=0,
        metavar="N",
        help="self-check of the loss check: leave the final versions of N tenders out of the crawler's output; "
        "the test must then fail with N lost",
    )
    args = parser.parse_args(argv)
    for name in ("rate", "workers", "writers"):
        if getattr(args, name) <= 0:
            parser.error(f"--{name} must be positive")
    if args.small < 0 or args.large < 0 or args.small + args.large == 0:
        parser.error("--small and --large must not be negative, nor both 0")
    try:
        from openprocurement_feed.demo.settings import parse_delay

        parse_delay(args.write_delay, "--write-delay")
    except Exception as error:  # pyramid's ConfigurationError, with the reason
        parser.error(str(error))
    if args.workers < 2:
        parser.error("--workers must be at least 2 (one of them is killed)")
    return args


@contextlib.contextmanager
def interrupts_as_keyboard() -> Iterator[None]:
    """SIGINT (also where a background job ignores it) and SIGTERM stop the
    test with a KeyboardInterrupt: the teardown runs."""

    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = {signum: signal.signal(signum, handler) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.plot is not None:
        from openprocurement_feed.plots import PlotExtraMissing, image_format, pyplot

        try:
            image_format(args.plot)
            pyplot()
        except (ValueError, PlotExtraMissing) as error:
            print(f"test-ops: --plot: {error}", file=sys.stderr, flush=True)
            return 2
    try:
        tools = find_tools()
    except Missing as error:
        if os.environ.get("OPS_OPTIONAL") == "1":
            print(f"test-ops: SKIPPED (OPS_OPTIONAL=1): {error}", flush=True)
            return 0
        print(f"test-ops: {error}", file=sys.stderr, flush=True)
        return 2
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="feed-test-ops-"))
    workdir.mkdir(parents=True, exist_ok=True)
    print(f"test-ops: files and logs in {workdir}", flush=True)
    run = Run(args, tools, workdir, Clock(args.budget))
    passed = False
    try:
        with interrupts_as_keyboard():
            try:
                lines = scenario(run)
            finally:
                run.say("stopping every process")
                run.close()
                if args.plot is not None:
                    draw_timeline(run, args.plot)
        print(f"\ntest-ops summary ({run.clock.now():.0f} s in all):", flush=True)
        for line in lines:
            print(f"  {line}", flush=True)
        passed = True
        print("test-ops: PASSED", flush=True)
        return 0
    except Failure as error:
        print(f"test-ops: FAILED: {error}", file=sys.stderr, flush=True)
        print(f"test-ops: the logs are in {workdir}", file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt:
        print(f"test-ops: interrupted; the logs are in {workdir}", file=sys.stderr, flush=True)
        return 130
    finally:
        if passed and not args.keep and args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
