"""``python -m benchmarks scale``: a million tenders (issue 43 item 5, SPEC I.3).

For each size (10,000, 100,000 and 1,000,000 by default; ``--sizes``) a feed
is built on a fresh embedded server (:mod:`.build`: the demo's document
shapes inserted with ``insert_many``, the sequencer's backfill and the
aggregates' build timed), served in both orders, and measured
(:mod:`.measure`): a page of 100 items (first, middle, last; forward and
descending), a full crawl by the reference crawler, an in-sync check,
``verify`` of a copy of every object, the sequencer's rematerialize, the RSS
of every process at the end. One table (:mod:`.report`) ends the run, with
the issue's goals and ratios; ``--save`` keeps the figures (JSON),
``--load`` prints (and ``--plot`` draws) saved ones.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from functools import partial
from pathlib import Path
from typing import TypeVar

from . import measure
from .build import ORDERS, built, say
from .measure import OrderFigures, full_crawl, in_sync, rematerialize, verify
from .paging import PageFigure, pages
from .report import render

SIZES = (10_000, 100_000, 1_000_000)
T = TypeVar("T")


def guarded(what: str, call: Callable[[], T], failed: T) -> T:
    """``call()``; ``failed`` (and a line that says why) where it raises: one
    figure that fails does not lose the others of its size."""
    say(what)
    try:
        return call()
    except Exception as error:  # reported, the run goes on
        say(f"{what} FAILED: {type(error).__name__}: {error}")
        return failed


def measure_size(size: int, folder: Path) -> list[OrderFigures]:
    """Build a feed of ``size`` tenders and measure both orders on it."""
    found = []
    with built(size, folder) as build:
        for order in ORDERS:
            one = OrderFigures(size, order, build=dict(build.seconds))
            one.pages = guarded(f"{size:,}, {order}: pages", partial(pages, build, order), {})
            one.in_sync = guarded(f"{size:,}, {order}: in-sync check", partial(in_sync, build, order), {})
            one.verify = guarded(f"{size:,}, {order}: verify", partial(verify, build, order), {})
            one.crawl = guarded(f"{size:,}, {order}: full crawl", partial(full_crawl, build, order), {})
            found.append(one)
        found[-1].rematerialize = guarded(f"{size:,}: rematerialize", partial(rematerialize, build), {})
        rss = build.rss_mb()
        for one in found:
            one.rss_mb = rss
    return found


def load(path: Path) -> list[OrderFigures]:
    figures = []
    for line in path.read_text(encoding="utf-8").splitlines():
        entry = json.loads(line)
        entry["pages"] = {name: PageFigure(**page) for name, page in entry["pages"].items()}
        figures.append(OrderFigures(**entry))
    return figures


def save(path: Path, figures: Sequence[OrderFigures]) -> None:
    with path.open("a", encoding="utf-8") as stream:
        for one in figures:
            stream.write(json.dumps(dataclasses.asdict(one)) + "\n")


def revision() -> str:
    """The commit measured (and whether the working tree differed from it)."""
    root = Path(__file__).resolve().parents[2]
    try:
        head = subprocess.run(  # nosec B603 B607 - git, fixed arguments
            ["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(  # nosec B603 B607
            ["git", "status", "--porcelain", "--untracked-files=no", "--", "openprocurement_feed"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"
    return head + (" with changes" if dirty else "")


def title(sizes: Sequence[int], measured: str = "") -> str:
    return (
        f"python -m benchmarks scale --sizes {','.join(str(size) for size in sizes)} "
        f"({measured or datetime.now(timezone.utc).strftime('%Y-%m-%d')}, {revision()}; the embedded server, "
        "a page of 100 items)"
    )


def run(sizes: Sequence[int] = SIZES, save_path: Path | None = None, workdir: Path | None = None) -> list[OrderFigures]:
    """Measure every size and print the table."""
    figures: list[OrderFigures] = []
    with tempfile.TemporaryDirectory(prefix="scale-bench-", dir=workdir) as name:
        for size in sizes:
            started = time.monotonic()
            measured = measure_size(size, Path(name) / str(size))
            say(f"{size:,} done in {time.monotonic() - started:.0f} s")
            if save_path is not None:
                save(save_path, measured)
            figures.extend(measured)
    render(figures, title(sizes))
    return figures


def sizes_list(value: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(part.replace("_", "")) for part in value.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected sizes such as 10000,100000, got {value!r}") from None
    if not sizes or any(size < 200 for size in sizes):
        raise argparse.ArgumentTypeError(f"expected sizes of 200 tenders or more, got {value!r}")
    return sizes


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks scale", description=__doc__)
    parser.add_argument(
        "--sizes",
        type=sizes_list,
        default=SIZES,
        metavar="N,N",
        help="tenders, comma-separated (default: 10000,100000,1000000)",
    )
    parser.add_argument(
        "--save", type=Path, default=None, metavar="FILE", help="append each size's figures to FILE (JSON lines)"
    )
    parser.add_argument(
        "--load",
        type=Path,
        action="append",
        default=[],
        metavar="FILE",
        help="print (and --plot) saved figures instead of running",
    )
    parser.add_argument("--plot", default=None, metavar="FILE", help="also draw the figure into FILE (.svg or .png)")
    parser.add_argument(
        "--crawl-seconds",
        type=float,
        default=measure.CRAWL_SECONDS,
        metavar="S",
        help="stop a full crawl after S seconds, its figures then of the pages read; 0: never (default: %(default)s)",
    )
    parser.add_argument("--workdir", type=Path, default=None, help="the temporary folder's parent")
    args = parser.parse_args(argv)
    measure.CRAWL_SECONDS = args.crawl_seconds
    if args.load:
        figures = [one for path in args.load for one in load(path)]
        render(figures, title(sorted({one.size for one in figures})))
    else:
        figures = run(args.sizes, args.save, args.workdir)
    if args.plot:
        from .plot import plot_scale

        print(f"Written: {plot_scale(figures, args.plot)}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
