"""What the subcommands share: how a subcommand is declared, the flags that
several of them take, and the argument types.

A subcommand module declares its ``--help`` line and its flags as data and
registers itself in one call::

    HELP = "check a live feed for ..."
    FLAGS = (URL, PAGE_LIMIT, HTTP_TIMEOUT.but(default=5.0), Flag("--wait", type=positive_float, ...))

    def add_parser(subparsers: Any) -> None:
        add_command(subparsers, "check", run, __doc__, help=HELP, flags=FLAGS)

A shared flag (:data:`URL`, :data:`MODE`, :data:`PAGE_LIMIT`,
:data:`HTTP_TIMEOUT`, :data:`MONGODB_URI`, :data:`WRITE_DELAY`,
:data:`RUN_FOR`, :data:`INTERVAL`) is written once, here; a command changes
what differs (its default, its help) with :meth:`Flag.but`. A command's own
flags are :class:`Flag` too, so every flag is declared the same way.

The argument types reject bad values with a message that names what was
wrong (argparse adds the flag's name).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any
from urllib.parse import urlsplit

from pyramid.exceptions import ConfigurationError

#: The feed modes a client may ask for (SPEC A): test objects only, or all.
MODES = ("test", "_all_")


def _int_at_least(value: str, low: int) -> int:
    try:
        number = int(value)
    except ValueError:
        number = low - 1
    if number < low:
        raise argparse.ArgumentTypeError(f"expected an integer >= {low}, got {value!r}")
    return number


def positive_int(value: str) -> int:
    """An integer >= 1."""
    return _int_at_least(value, 1)


def non_negative_int(value: str) -> int:
    """An integer >= 0."""
    return _int_at_least(value, 0)


def non_negative_float(value: str) -> float:
    """A finite number >= 0."""
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {value!r}") from None
    if not math.isfinite(number) or number < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {value!r}")
    return number


def positive_float(value: str) -> float:
    """A finite number > 0."""
    number = non_negative_float(value)
    if number == 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {value!r}")
    return number


def watermark_seconds(value: str) -> float:
    """A watermark in seconds (0 disables it)."""
    return non_negative_float(value)


def port_number(value: str) -> int:
    """A TCP port, 1-65535."""
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number 1-65535, got {value!r}") from None
    if not 1 <= number <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port number 1-65535, got {value!r}")
    return number


def http_url(value: str) -> str:
    """An http:// or https:// URL with a host."""
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise argparse.ArgumentTypeError(f"expected an http:// or https:// URL, got {value!r}")
    return value


def mongodb_uri(value: str) -> str:
    """A ``mongodb://`` URI pymongo accepts (hosts, ports, options), or a
    ``mongodb+srv://`` one with a host (its records are looked up on use)."""
    from pymongo.errors import ConfigurationError as MongoConfigurationError
    from pymongo.uri_parser import parse_uri

    if value.startswith("mongodb+srv://"):
        if not urlsplit(value).hostname:
            raise argparse.ArgumentTypeError(f"expected a host after mongodb+srv://, got {value!r}")
        return value
    if not value.startswith("mongodb://"):
        raise argparse.ArgumentTypeError(f"expected a mongodb:// or mongodb+srv:// URI, got {value!r}")
    try:
        parse_uri(value)
    except (MongoConfigurationError, ValueError) as error:
        raise argparse.ArgumentTypeError(f"{value!r}: {str(error).split('. Hint')[0]}") from None
    return value


def delay_range(value: str) -> str:
    """Milliseconds a write stays open after its stamp: ``0``, ``20`` or ``5-40``."""
    from ..demo.settings import parse_delay  # the demo's own rule, one place

    try:
        parse_delay(value, "write delay")
    except ConfigurationError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return value


# -- declaring subcommands and their flags ----------------------------------------


@dataclass(frozen=True, init=False, eq=False)
class Flag:
    """One command-line argument: the names and keyword arguments of
    :meth:`argparse.ArgumentParser.add_argument`, kept to be added later
    (immutable: a shared flag cannot be changed by one command for all)."""

    names: tuple[str, ...]
    options: Mapping[str, Any]

    def __init__(self, *names: str, **options: Any) -> None:
        if not names:
            raise ValueError("a flag needs at least one name")
        object.__setattr__(self, "names", names)
        object.__setattr__(self, "options", MappingProxyType(dict(options)))

    def but(self, **changes: Any) -> Flag:
        """This flag with some keyword arguments changed (a command's own
        default or help)."""
        return Flag(*self.names, **{**self.options, **changes})

    def add_to(self, parser: argparse.ArgumentParser) -> argparse.Action:
        """Add the argument to ``parser``."""
        return parser.add_argument(*self.names, **self.options)


def add_command(
    subparsers: Any,
    name: str,
    run: Callable[[argparse.Namespace], int],
    description: str | None,
    *,
    help: str,
    flags: Iterable[Flag] = (),
) -> argparse.ArgumentParser:
    """Register the subcommand ``name``: its one-line ``help`` for the list
    of commands, its module docstring as the ``--help`` text (kept as
    written), its flags, and ``run(args) -> exit status``.

    ``args.parser`` is the subcommand's parser, for errors that concern
    several flags at once (``args.parser.error(...)``: exit status 2).
    """
    parser: argparse.ArgumentParser = subparsers.add_parser(
        name,
        help=help,
        description=description,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    for flag in flags:
        flag.add_to(parser)
    parser.set_defaults(func=run, parser=parser)
    return parser


# -- the flags several subcommands take -------------------------------------------

#: The feed to read (check, sync) or the API's URL (monitor).
URL = Flag("url", type=http_url, metavar="URL", help="the feed, e.g. http://127.0.0.1:6543/api/2.5/tenders")
#: ``mode`` of the feed requests.
MODE = Flag(
    "--mode",
    choices=MODES,
    default=None,
    help="the test feed or the feed of everything (default: the URL's, else real objects only)",
)
#: Page size asked for.
PAGE_LIMIT = Flag(
    "--limit",
    type=positive_int,
    default=100,
    metavar="N",
    help="page size to ask for; the server may clamp it (default: %(default)s)",
)
#: Timeout of one HTTP request.
HTTP_TIMEOUT = Flag(
    "--timeout", type=positive_float, default=10.0, metavar="S", help="HTTP timeout per request (default: %(default)g)"
)
#: A MongoDB to use instead of the embedded server.
MONGODB_URI = Flag(
    "--mongodb-uri",
    type=mongodb_uri,
    default=None,
    metavar="URI",
    help="use this MongoDB instead of the embedded database",
)
#: How long a demo write stays open after its stamp.
WRITE_DELAY = Flag(
    "--write-delay",
    type=delay_range,
    default="0",
    metavar="MS",
    help="ms a write stays open after its stamp: 0, 20 or a range 5-40 (default: %(default)s)",
)
#: Stop by itself after S seconds.
RUN_FOR = Flag(
    "--for",
    dest="run_for",
    type=positive_float,
    default=None,
    metavar="S",
    help="stop by itself after S seconds (default: run until stopped)",
)
#: Seconds between two rounds of a repeating command.
INTERVAL = Flag(
    "--interval",
    type=non_negative_float,
    default=0.5,
    metavar="S",
    help="seconds between two rounds (default: %(default)s)",
)
