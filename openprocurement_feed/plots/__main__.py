"""``python -m openprocurement_feed.plots shape FILE``: draw the production
shape of docs/deploying.rst (``--workers`` web workers, ``--sequencers``
sequencers) into FILE, SVG or PNG by the extension."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from . import PlotExtraMissing, image_format


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv``, draw; the exit status (2: a bad file name or no ``plot`` extra)."""
    parser = argparse.ArgumentParser(prog="python -m openprocurement_feed.plots", description=__doc__)
    parser.add_argument("picture", choices=("shape",), help="the picture to draw")
    parser.add_argument("file", help="where to write it (.svg or .png)")
    parser.add_argument("--workers", type=int, default=3, help="web workers drawn (default: %(default)s)")
    parser.add_argument("--sequencers", type=int, default=2, help="sequencers drawn (default: %(default)s)")
    args = parser.parse_args(argv)
    try:
        image_format(args.file)
    except ValueError as error:
        parser.error(str(error))
    from .production import plot_shape

    try:
        plot_shape(args.file, args.workers, args.sequencers)
    except PlotExtraMissing as error:
        print(f"{parser.prog}: {error}", file=sys.stderr)
        return 2
    except OSError as error:
        print(f"{parser.prog}: cannot write {args.file!r}: {error.strerror or error}", file=sys.stderr)
        return 2
    print(f"Written: {args.file}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
