"""The ``openprocurement-feed`` command: one entry point, one module per subcommand.

Each module in :mod:`openprocurement_feed.commands` provides
``add_parser(subparsers)``, which registers its subcommand and sets
``func(args) -> int`` as the parser default.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

from .quiet import quiet_dependency_warnings

#: Subcommand modules under openprocurement_feed.commands, in --help order.
COMMANDS = ("run", "sequence", "race", "check", "monitor", "sync", "mirror", "verify", "export", "explain", "faults")


class CommandError(Exception):
    """A failure to report as one line on stderr, with exit status 2."""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every available subcommand."""
    parser = argparse.ArgumentParser(
        prog="openprocurement-feed",
        description="Run, test and follow openprocurement-style feeds.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages to stderr")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"{__package__}.commands.{name}")
        except ModuleNotFoundError as error:
            if error.name == f"{__package__}.commands.{name}":
                continue  # a subcommand not shipped in this build
            raise
        module.add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` and run the subcommand; returns the exit status."""
    quiet_dependency_warnings()  # also when called as a function
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    try:
        return int(args.func(args) or 0)
    except CommandError as error:
        print(f"openprocurement-feed {args.command}: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("Interrupted.", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
