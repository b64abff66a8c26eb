"""The options of ``python -m benchmarks scale`` (a group of the benchmarks'
parser, :mod:`benchmarks.options`; ``python -m benchmarks.scale`` takes the
same). Nothing heavy is imported here: the parser is built for every part."""

from __future__ import annotations

import argparse
from pathlib import Path

#: The sizes of the issue (SPEC I.3).
SIZES = (10_000, 100_000, 1_000_000)
#: Seconds a full crawl may take before it is stopped.
CRAWL_SECONDS = 900.0
#: What is measured at each size (``--scale-parts``).
PARTS = ("pages", "in-sync", "verify", "crawl", "rematerialize")


def parts_list(value: str) -> tuple[str, ...]:
    """Comma-separated parts of :data:`PARTS`."""
    parts = tuple(part.strip() for part in value.split(",") if part.strip())
    unknown = [part for part in parts if part not in PARTS]
    if not parts or unknown:
        raise argparse.ArgumentTypeError(f"expected parts among {','.join(PARTS)}, got {value!r}")
    return parts


def sizes_list(value: str) -> tuple[int, ...]:
    """Comma-separated sizes, each at least 200 tenders."""
    try:
        sizes = tuple(int(part.replace("_", "")) for part in value.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected sizes such as 10000,100000, got {value!r}") from None
    if not sizes or any(size < 200 for size in sizes):
        raise argparse.ArgumentTypeError(f"expected sizes of 200 tenders or more, got {value!r}")
    return sizes


def add_scale_options(parser: argparse.ArgumentParser) -> None:
    """The ``scale`` part's options."""
    group = parser.add_argument_group("scale")
    group.add_argument(
        "--sizes",
        type=sizes_list,
        default=SIZES,
        metavar="N,N",
        help="tenders, comma-separated (default: 10000,100000,1000000)",
    )
    group.add_argument(
        "--crawl-seconds",
        type=float,
        default=CRAWL_SECONDS,
        metavar="S",
        help="stop a full crawl after S seconds, its figures then of the pages read; 0: never (default: %(default)s)",
    )
    group.add_argument(
        "--scale-parts",
        type=parts_list,
        default=PARTS,
        metavar="PART,PART",
        help=(
            "what to measure at each size (default: all of %(default)s); without in-sync the build ends "
            "once every position is backfilled, the aggregates still building beside the pages"
        ),
    )
    group.add_argument(
        "--scale-save", type=Path, default=None, metavar="FILE", help="append each size's figures to FILE (JSON lines)"
    )
    group.add_argument(
        "--scale-load",
        type=Path,
        action="append",
        default=[],
        metavar="FILE",
        help="print (and --plot FILE) the figures saved in FILE instead of running (repeatable)",
    )
    group.add_argument(
        "--scale-cache-size",
        default=None,
        metavar="SIZE",
        help="the embedded server's cache (default: the package's, mongodb.embedded_cache_size)",
    )
    group.add_argument("--scale-workdir", type=Path, default=None, metavar="DIR", help="the temporary folder's parent")
