"""``openprocurement-feed explain``: do the indexes serve the feed queries?

Connects to a MongoDB, checks that the feed indexes exist on the collection
and explains every query shape the feed sends (ascending and descending,
first page and after an offset, each mode, and the scoped feed with
``--scope-field``): the plan's stages, the index it scans, and the keys and
documents examined per document returned.

``--order commit`` explains a commit-ordered feed instead: the shapes on the
positions collection beside ``--collection`` (``<collection>_feed_positions``,
sorted on ``committed_ts`` and bounded by the sequencer's checkpoint), the
read of a page's documents by ``_id``, and the positions indexes.

Exit status: 0 when every shape is served by an index in index order; 1 when
a shape is served by a collection scan or an in-memory sort, or a feed index
is missing; 2 for a usage or connection error.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from ..cli import CommandError
from ..store.orders import ORDERS, WATERMARK, order_kind, positions_name
from .options import PAGE_LIMIT, Flag, add_command, positive_int


def field_name(value: str) -> str:
    """A document field name: not empty, no leading ``$``, no NUL."""
    if not value or value.startswith("$") or "\x00" in value:
        raise argparse.ArgumentTypeError(
            f"expected a document field name (not empty, not starting with $), got {value!r}"
        )
    return value


def max_limit(value: str) -> int:
    """A page size, 1-1000."""
    number = positive_int(value)
    if number > 1000:
        raise argparse.ArgumentTypeError(f"expected a page size of at most 1000, got {value!r}")
    return number


#: The line in ``openprocurement-feed --help``.
HELP = "check that the indexes of a MongoDB collection serve every feed query"
#: The command's flags, shared ones from :mod:`.options` first where they apply.
FLAGS = (
    Flag(
        "--uri",
        default=os.environ.get("MONGODB_URI"),
        metavar="MONGODB_URI",
        help="the mongodb:// URI (default: the MONGODB_URI environment variable)",
    ),
    Flag("--db", default="openprocurement", metavar="NAME", help="the database (default: %(default)s)"),
    Flag("--collection", default="tenders", help="the feed's collection (default: %(default)s)"),
    Flag(
        "--order",
        choices=ORDERS,
        default=WATERMARK,
        help="the feed's order: explain the collection itself (watermark) or "
        "its positions collection (commit) (default: %(default)s)",
    ),
    Flag(
        "--scope-field",
        type=field_name,
        default=None,
        metavar="FIELD",
        help="also explain the feed scoped on this field (e.g. frameworkID)",
    ),
    PAGE_LIMIT.but(type=max_limit, help="page size of the explained queries (default: %(default)s)"),
    Flag(
        "--timeout-ms",
        type=positive_int,
        default=5000,
        metavar="MS",
        help="server selection timeout in ms (default: %(default)s)",
    ),
)


def add_parser(subparsers: Any) -> None:
    """Register ``explain`` and its flags."""
    add_command(subparsers, "explain", run, __doc__, help=HELP, flags=FLAGS)


def _progress(done: int, total: int) -> None:
    if sys.stderr.isatty():
        end = "\n" if done == total else ""
        print(f"\rexplaining feed query shapes: {done}/{total}", end=end, file=sys.stderr, flush=True)


def check_collections(names: list[str], args: argparse.Namespace) -> None:
    """Refuse a feed collection (or, in commit order, a positions collection)
    that is not in the database, with what to check."""
    if args.collection not in names:
        raise CommandError(f"no collection {args.collection!r} in database {args.db!r} (check --db and --collection)")
    positions = positions_name(args.collection)
    if order_kind(args.order).sequenced and positions not in names:
        raise CommandError(
            f"no positions collection {positions!r} in database {args.db!r}: is the feed of "
            f"{args.collection!r} commit-ordered (feed.order = commit), and has its sequencer "
            "run? (or drop --order commit)"
        )


def run(args: argparse.Namespace) -> int:
    from pymongo import MongoClient
    from pymongo.errors import ConfigurationError, ConnectionFailure, InvalidName, OperationFailure, PyMongoError

    from ..operations.explain import analyse, format_analysis

    if not args.uri:
        raise CommandError("no database given: pass --uri mongodb://… or set MONGODB_URI")
    if not args.uri.startswith(("mongodb://", "mongodb+srv://")):
        raise CommandError(f"--uri: expected a mongodb:// or mongodb+srv:// URI, got {args.uri!r}")
    try:
        client: MongoClient[Any] = MongoClient(args.uri, serverSelectionTimeoutMS=args.timeout_ms)
    except (ConfigurationError, ValueError) as error:
        raise CommandError(f"--uri: {error}") from None
    try:
        try:
            database = client[args.db]
            check_collections(database.list_collection_names(), args)
            analysis = analyse(
                database[args.collection],
                scope_field=args.scope_field,
                limit=args.limit,
                progress=_progress,
                order=args.order,
            )
        except InvalidName as error:
            raise CommandError(f"--db/--collection: {error}") from None
        except ConnectionFailure as error:
            raise CommandError(
                f"cannot reach the database within {args.timeout_ms} ms: {str(error).split(' (configured')[0]}"
            ) from None
        except OperationFailure as error:
            raise CommandError(f"the server refused a command: {error.details or error}") from None
        except PyMongoError as error:
            raise CommandError(f"database error: {error}") from None
    finally:
        client.close()
    print(format_analysis(analysis))
    return 0 if analysis.ok else 1
