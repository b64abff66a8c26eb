"""Running ``python -m benchmarks scale``: every size built and measured in
turn, then the table (and the figure)."""

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

from . import build as building
from . import measure
from .build import ORDERS, built, say
from .cli import PARTS, SIZES, add_scale_options
from .measure import OrderFigures, full_crawl, in_sync, rematerialize, verify
from .paging import PageFigure, pages
from .report import render

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


def measure_size(size: int, folder: Path, parts: Sequence[str] = PARTS) -> list[OrderFigures]:
    """Build a feed of ``size`` tenders and measure ``parts`` of both orders on it."""
    found = []
    measured = f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {revision()}"
    with built(size, folder, aggregates="in-sync" in parts) as build:
        for order in ORDERS:
            one = OrderFigures(size, order, build=dict(build.seconds), measured=measured)
            if "pages" in parts:
                one.pages = guarded(f"{size:,}, {order}: pages", partial(pages, build, order), {})
            if "in-sync" in parts:
                one.in_sync = guarded(f"{size:,}, {order}: in-sync check", partial(in_sync, build, order), {})
            if "verify" in parts:
                one.verify = guarded(f"{size:,}, {order}: verify", partial(verify, build, order), {})
            if "crawl" in parts:
                one.crawl = guarded(f"{size:,}, {order}: full crawl", partial(full_crawl, build, order), {})
            found.append(one)
        if "rematerialize" in parts:
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


def title(figures: Sequence[OrderFigures]) -> str:
    sizes = sorted({one.size for one in figures})
    measured = "; ".join(dict.fromkeys(one.measured or "?" for one in figures))
    return (
        f"python -m benchmarks scale --sizes {','.join(str(size) for size in sizes)} "
        f"(measured {measured}; the embedded server, a page of 100 items)"
    )


def run(
    sizes: Sequence[int] = SIZES,
    save_path: Path | None = None,
    workdir: Path | None = None,
    parts: Sequence[str] = PARTS,
) -> list[OrderFigures]:
    """Measure ``parts`` at every size and print the table."""
    figures: list[OrderFigures] = []
    with tempfile.TemporaryDirectory(prefix="scale-bench-", dir=workdir) as name:
        for size in sizes:
            started = time.monotonic()
            measured = measure_size(size, Path(name) / str(size), parts)
            say(f"{size:,} done in {time.monotonic() - started:.0f} s")
            if save_path is not None:
                save(save_path, measured)
            figures.extend(measured)
    render(figures, title(figures))
    return figures


def from_args(args: argparse.Namespace) -> list[OrderFigures]:
    """Run (or load) and print, as the parsed options say."""
    measure.CRAWL_SECONDS = args.crawl_seconds
    building.CACHE_SIZE = args.scale_cache_size
    if args.scale_load:
        figures = [one for path in args.scale_load for one in load(path)]
        render(figures, title(figures))
    else:
        figures = run(args.sizes, args.scale_save, args.scale_workdir, args.scale_parts)
    if args.plot:
        from .plot import plot_scale

        print(f"Written: {plot_scale(figures, args.plot)}")
    return figures


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m benchmarks.scale [options]``: the options of the part alone."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.scale", description=__doc__)
    add_scale_options(parser)
    parser.add_argument("--plot", default=None, metavar="FILE", help="also draw the figure into FILE (.svg or .png)")
    from_args(parser.parse_args(argv))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
