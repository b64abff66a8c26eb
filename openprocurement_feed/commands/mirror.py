"""``openprocurement-feed mirror URL --db DB``: follow a feed into a database that checks and heals itself.

One row per object in the table feed_objects of DB (an SQLite file: a path
or sqlite:///FILE, the default; or postgresql://USER@HOST/DB), the feed item
or with --fetch the whole object (GET URL/{id}); a page's rows and the
position after it are written in one transaction, so a restart (after
Ctrl-C, a crash, a kill -9) goes on where the last page ended, with nothing
lost and no row twice. A row is replaced only by a newer dateModified.
--name (default: the URL's last path segment) names the feed inside DB:
one database holds several feeds.

The command crawls the history and the changes as ``sync`` does, then
long-polls at the head until stopped; --once stops at the head. Every
--verify-every seconds once caught up (and at the end of --once) it checks
its rows against the feed's reconcile endpoint, as ``verify --db`` does,
and repairs them in place: a missing or stale object is read and written,
an extra one deleted. Each check prints one line and is kept in feed_state.

--import FILE first moves a JSON-lines copy (as ``sync --out`` writes it)
into DB; a feed without a position then starts at the head, and its first
check repairs what the file lacked.

Exit status: 0 done (or stopped), 1 the feed could not be followed (or
--once's check could not run), 2 bad input (the database unreachable or of
another schema version, a URL of another scheme, a feed without a reconcile
endpoint): one line, nothing written.
"""

from __future__ import annotations

import argparse
import signal
import sys
from typing import Any

from ..cli import CommandError
from .mirror_db import DB, NAME, open_store
from .options import HTTP_TIMEOUT, MODE, PAGE_LIMIT, Flag, add_command, non_negative_float, positive_int
from .sync import field_list

HELP = "follow a feed into SQLite or PostgreSQL, one row per object, checked and repaired on a schedule"
FLAGS = (
    Flag("url", metavar="URL", help="the feed, e.g. http://127.0.0.1:6543/api/2.5/tenders"),
    DB,
    NAME,
    Flag("--fetch", action="store_true", help="keep whole objects (GET URL/{id}), not feed items"),
    Flag("--once", action="store_true", help="stop at the head, after a check"),
    Flag(
        "--verify-every",
        type=non_negative_float,
        default=3600.0,
        metavar="SECONDS",
        help="seconds between two checks once caught up, 0 for none (default: %(default)g)",
    ),
    Flag("--import", dest="import_file", metavar="FILE", help="first move this JSON-lines copy (sync --out) in"),
    MODE,
    Flag("--opt-fields", type=field_list, metavar="LIST", help="extra item fields to ask for, comma-separated"),
    PAGE_LIMIT,
    Flag(
        "--longpoll",
        type=non_negative_float,
        default=25.0,
        metavar="SECONDS",
        help="at the head, ask the server to hold a request this long for a change (default: %(default)s)",
    ),
    HTTP_TIMEOUT.but(default=60.0, metavar="SECONDS", help="HTTP read timeout (default: %(default)s)"),
    Flag(
        "--fetch-concurrency",
        type=positive_int,
        default=8,
        metavar="N",
        help="objects read at once (--fetch, repairs) (default: %(default)s)",
    ),
    Flag("--no-progress", action="store_true", help="no progress display on stderr"),
)


def add_parser(subparsers: Any) -> None:
    """Register ``mirror`` and its flags."""
    add_command(subparsers, "mirror", run, __doc__, help=HELP, flags=FLAGS)


def probe(url: str, mode: str | None, timeout: float) -> None:
    """The feed's reconcile endpoint answers (else :class:`CommandError`)."""
    from ..client import FeedError, FeedUnavailable
    from ..client.reconcile import FeedReconciler

    try:
        with FeedReconciler(url, mode=mode, timeout=(10.0, timeout)) as reconciler:
            reconciler.horizon()
    except (FeedUnavailable, FeedError) as error:
        raise CommandError(f"the feed's reconcile endpoint cannot be read: {error}") from None


def run(args: argparse.Namespace) -> int:
    from ..client import FeedError, FeedUnavailable, StateError
    from ..client.http import split_feed_url
    from ..client.mirror import Mirror, MirrorError, feed_name, import_lines
    from ..client.mirror.sink import PageSink
    from ..client.state import SyncState

    try:
        identity, _ = split_feed_url(args.url, args.mode, args.opt_fields)
        name = args.name or feed_name(args.url)
    except FeedError as error:
        raise CommandError(str(error)) from None
    store = open_store(args.db)
    try:
        if args.verify_every > 0:
            probe(args.url, args.mode, args.timeout)
        if args.import_file:
            try:
                with open(args.import_file, encoding="utf-8"):
                    pass
            except OSError as error:
                raise CommandError(f"cannot read --import {args.import_file!r}: {error.strerror or error}") from None
        try:
            if store.load_state(name) is not None:  # the feed's row, if any, is of this URL
                PageSink(store, name, objects=args.fetch).load(identity)
            store.create_schema()
            if args.import_file:
                lines = import_lines(store, name, args.import_file, args.url, args.fetch, SyncState(feed=identity))
                print(f"Imported {lines} line(s) of {args.import_file} into {name}.", file=sys.stderr)
        except (StateError, MirrorError) as error:
            raise CommandError(str(error)) from None
        except ValueError as error:
            raise CommandError(f"cannot import {args.import_file!r}: {error}") from None
        return _follow(args, store, name, Mirror)
    except (FeedUnavailable, FeedError) as error:
        print(f"openprocurement-feed mirror: {error}", file=sys.stderr)
        return 1
    finally:
        store.close()


def _follow(args: argparse.Namespace, store: Any, name: str, mirror_class: Any) -> int:
    from tqdm.contrib.logging import logging_redirect_tqdm

    from .sync import Progress, _graceful_stop

    progress = Progress(enabled=not args.no_progress)
    progress.bar.set_description(f"mirror {name}")
    try:
        mirror = mirror_class(
            args.url,
            store,
            name,
            fetch=args.fetch,
            verify_every=args.verify_every,
            mode=args.mode,
            opt_fields=args.opt_fields,
            limit=args.limit,
            longpoll=args.longpoll,
            timeout=(10.0, args.timeout),
            fetch_concurrency=args.fetch_concurrency,
            on_progress=progress.update,
            on_check=lambda report: progress.write(report.line(name)),
            on_check_failed=lambda error: progress.write(f"check of {name} failed: {error}"),
        )
        received: list[int] = []
        with mirror, _graceful_stop(mirror, received), logging_redirect_tqdm():
            try:
                stats = mirror.run(once=args.once)
            finally:
                progress.close()
                print(summary(mirror, args.db), file=sys.stderr)
    finally:
        progress.close()
    if received:
        return 130 if received[0] == signal.SIGINT else 0
    return 0 if not (args.once and stats.failed_checks) else 1


def summary(mirror: Any, db: str) -> str:
    """The report printed at the end."""
    stats = mirror.stats.sync
    rows = mirror.store.count(mirror.name)
    lines = [
        f"Mirrored {stats.items} items from {stats.pages} pages into {db} (feed {mirror.name}: {rows} rows) "
        f"in {stats.elapsed:.1f} s ({stats.items_per_second:.0f} items/s); retries: {stats.retries}.",
    ]
    checks = mirror.stats.checks
    if checks or mirror.stats.failed_checks:
        last = checks[-1].line(mirror.name) if checks else "none ran"
        lines.append(f"Checks: {len(checks)} ({mirror.stats.failed_checks} failed); last: {last}.")
    return "\n".join(lines)
