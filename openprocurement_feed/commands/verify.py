"""``openprocurement-feed verify URL --items FILE``: prove a crawler's copy complete, or repair it.

``verify URL --db DB [--name NAME]`` checks a mirror's copy (see ``mirror``)
instead: its rows read from the database's index, and with --repair
repaired in place (what differs read and written, what is extra deleted).

Reads the copy in FILE (JSON lines with at least "id" and "dateModified",
as ``sync --out`` writes them; the newest line of an id wins, a line
{"id": "...", "removed": true} takes it out) and reconciles it with the
feed's set over the feed's reconcile endpoint (URL's parent + /feeds/NAME/
reconcile, e.g. http://127.0.0.1:6543/api/2.5/feeds/tenders/reconcile):
rounds of Negentropy V1 whose cost grows with the differences, not with the
feed. Only versions below the feed's horizon are compared, on both sides.

Reports what is missing (the feed has it, the copy does not), stale (the
copy holds another version) and extra (the copy holds what the feed no
longer shows). An object seen as stale or extra is read once more
(GET URL/{id}): one that changed during the check is reported as changed,
not as a difference (the next sync picks it up). A line per round on
stderr, then a summary (or the lists as JSON with --json).

With --repair the current version of every missing, stale and changed
object is appended to FILE (the whole object with --fetch, as ``sync
--fetch`` writes them; else the feed item: id and dateModified), and a
removal line for every extra one; then the copy is checked again.

Exit status: 0 in sync (after --repair: in sync when checked again), 1
differences found, 2 the feed could not be read (or FILE, or the flags).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from typing import TYPE_CHECKING, Any, TextIO

from ..cli import CommandError
from .options import HTTP_TIMEOUT, MODE, URL, Flag, add_command, positive_int
from .verify_report import round_printer, summary

if TYPE_CHECKING:
    from ..client.reconcile import FeedReconciler, ReconcileResult

HELP = "check a crawler's copy against a feed in a few round trips, and repair it"
FLAGS = (
    URL.but(help="the feed, e.g. http://127.0.0.1:6543/api/2.5/tenders"),
    Flag(
        "--items",
        metavar="FILE",
        help="the copy: JSON lines with id and dateModified, as sync --out writes them",
    ),
    Flag("--db", metavar="DB", help="the copy: a mirror's database (sqlite:///FILE, a path, postgresql://...)"),
    Flag("--name", metavar="NAME", help="with --db: the feed's name in it (default: the URL's last segment)"),
    Flag("--json", action="store_true", help="print the result as JSON on stdout (the lists of ids)"),
    Flag(
        "--repair",
        action="store_true",
        help="append the current version of what differs to FILE, removal lines for what is extra, check again",
    ),
    Flag("--fetch", action="store_true", help="with --repair: append whole objects (GET URL/{id}), as sync --fetch"),
    MODE,
    HTTP_TIMEOUT.but(default=60.0, metavar="SECONDS", help="HTTP read timeout (default: %(default)s)"),
    Flag(
        "--max-attempts",
        type=positive_int,
        default=5,
        metavar="N",
        help="attempts per request before giving up (503 waits as its Retry-After says) (default: %(default)s)",
    ),
    Flag(
        "--fetch-concurrency",
        type=positive_int,
        default=8,
        metavar="N",
        help="objects read at once (the second read, --repair) (default: %(default)s)",
    ),
)


def add_parser(subparsers: Any) -> None:
    """Register ``verify`` and its flags."""
    add_command(subparsers, "verify", run, __doc__, help=HELP, flags=FLAGS)


def run(args: argparse.Namespace) -> int:
    if (args.items is None) == (args.db is None):
        args.parser.error("give the copy to check: --items FILE or --db DB (one of them)")
    if args.db is not None:
        if args.fetch:
            args.parser.error("--fetch goes with --items (a mirror repairs rows as it keeps them)")
        from .verify_db import verify_db

        return verify_db(
            args.url,
            args.db,
            args.name,
            mode=args.mode,
            repair=args.repair,
            as_json=args.json,
            timeout=args.timeout,
            concurrency=args.fetch_concurrency,
            max_attempts=args.max_attempts,
        )
    if args.name is not None:
        args.parser.error("--name goes with --db")
    if args.fetch and not args.repair:
        args.parser.error("--fetch goes with --repair (it chooses what the repair appends)")
    return verify(
        args.url,
        args.items,
        mode=args.mode,
        repair=args.repair,
        fetch=args.fetch,
        as_json=args.json,
        timeout=args.timeout,
        concurrency=args.fetch_concurrency,
        max_attempts=args.max_attempts,
    )


def verify(
    url: str,
    items: str,
    *,
    mode: str | None = None,
    repair: bool = False,
    fetch: bool = False,
    as_json: bool = False,
    timeout: float = 60.0,
    concurrency: int = 8,
    max_attempts: int | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Check (and with ``repair`` repair) the copy in ``items``; the exit
    status. Used by ``verify`` and by ``sync --verify``.

    :raises CommandError: the copy cannot be read (exit status 2).
    """
    import dataclasses

    from ..client import FeedError, FeedHTTP, FeedUnavailable
    from ..client.itemsfile import ItemsFileError
    from ..client.reconcile import RECONCILE_RETRY, FeedReconciler

    out = out or sys.stdout
    err = err or sys.stderr
    retry = RECONCILE_RETRY if max_attempts is None else dataclasses.replace(RECONCILE_RETRY, max_attempts=max_attempts)
    try:
        http = FeedHTTP(url, mode=mode, retry=retry, timeout=(10.0, timeout))
        reconciler = FeedReconciler(url, mode=mode, http=http, concurrency=concurrency)
    except FeedError as error:
        raise CommandError(str(error)) from None
    checks: list[dict[str, Any]] = []
    with reconciler, contextlib.closing(http):
        try:
            result = _check(reconciler, items, err, "")
            checks.append(result.as_json())
            if not as_json:
                print(summary(result), file=out, flush=True)
            if repair and (result.differences or result.changed):
                appended = _repair(reconciler, result, items, fetch)
                print(f"Repair: appended {appended} line(s) to {items}; checking again.", file=err, flush=True)
                result = _check(reconciler, items, err, "again: ")
                checks.append(result.as_json())
                if not as_json:
                    print(summary(result, repaired=True), file=out)
        except ItemsFileError as error:
            raise CommandError(str(error)) from None
        except (FeedUnavailable, FeedError, ValueError) as error:
            print(f"openprocurement-feed verify: the feed could not be read: {error}", file=err)
            return 2
        except OSError as error:
            raise CommandError(f"cannot write {items!r}: {error.strerror or error}") from None
    if as_json:
        document = checks[-1] if len(checks) == 1 else {**checks[-1], "before_repair": checks[0]}
        print(json.dumps(document, indent=2), file=out)
    return 0 if result.in_sync else 1


def _check(reconciler: FeedReconciler, items: str, err: TextIO, label: str) -> ReconcileResult:
    """Read the copy and reconcile it, a progress line per round on ``err``."""
    from ..client.itemsfile import read_items

    copy = read_items(items)
    print(f"Copy {items}: {len(copy)} objects in {copy.lines} lines.", file=err)
    return reconciler.run(copy.pairs(), on_round=round_printer(label, err))


def _repair(reconciler: FeedReconciler, result: ReconcileResult, items: str, fetch: bool) -> int:
    """Append the repair lines to the copy; how many."""
    from ..client import JsonLinesWriter

    lines = reconciler.repair_lines(result, whole=fetch)
    with JsonLinesWriter(items) as writer:
        writer.write(lines)
    return len(lines)
