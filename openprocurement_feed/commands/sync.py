"""``openprocurement-feed sync``: follow a feed into a JSON-lines file.

Crawls the feed at URL the way the protocol intends (newest page, history
backward, changes forward) and appends every new item, as the feed served it,
to --out. The position is saved to --state after each page has been written,
so a restart (after Ctrl-C, a crash or a reboot) goes on where it stopped;
delivery is at least once. Without --follow the command exits once the
history is done and the forward crawl has caught up.

With --fetch the command reads the whole object of every new item
(GET URL/{id}), --fetch-concurrency at a time, and writes the objects instead
of the feed items; an object deleted since its page was served (404) is
skipped with a warning.

With --verify the copy in --out is checked against the feed once the sync
has caught up, as ``openprocurement-feed verify URL --items OUT`` does (exit
status 0 in sync, 1 differences found, 2 the feed could not be read).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
import threading
from typing import Any

from ..cli import CommandError
from .options import (
    HTTP_TIMEOUT,
    MODE,
    PAGE_LIMIT,
    URL,
    Flag,
    add_command,
    non_negative_float,
    positive_float,
    positive_int,
)

FIELD_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")
MODES = ("test", "_all_")


def field_list(value: str) -> list[str]:
    """A comma-separated list of field names."""
    names = [name.strip() for name in value.split(",") if name.strip()]
    bad = [name for name in names if not FIELD_RE.fullmatch(name)]
    if not names or bad:
        raise argparse.ArgumentTypeError(f"expected a comma-separated list of field names, got {value!r}")
    return names


HELP = "follow a feed into a JSON-lines file, resumable"
FLAGS = (
    URL.but(help="the feed URL, e.g. http://127.0.0.1:6543/api/2.5/tenders"),
    Flag(
        "--state",
        required=True,
        metavar="FILE",
        help="the state file: read at start if it exists, rewritten after every page",
    ),
    Flag(
        "--out",
        metavar="FILE",
        help="append each new item here as one JSON object per line (default: count the items only)",
    ),
    Flag("--follow", action="store_true", help="keep polling for changes once caught up (until Ctrl-C)"),
    MODE.but(help="feed mode: test objects only, or _all_ (default: real objects only)"),
    Flag("--opt-fields", type=field_list, metavar="LIST", help="extra item fields to ask for, comma-separated"),
    PAGE_LIMIT,
    Flag(
        "--poll",
        type=positive_float,
        default=1.0,
        metavar="SECONDS",
        help="seconds between polls once caught up, when the server does not long-poll (default: %(default)s)",
    ),
    Flag(
        "--longpoll",
        type=non_negative_float,
        default=25.0,
        metavar="SECONDS",
        help="once caught up, ask the server to hold each request up to SECONDS until a change arrives "
        "(feed=longpoll; a server that does not support it is polled every --poll); 0 to always poll "
        "(default: %(default)s)",
    ),
    Flag(
        "--give-up-after",
        type=non_negative_float,
        default=300.0,
        metavar="SECONDS",
        help="stop retrying a failing request after this long, 0 for never (default: %(default)s)",
    ),
    Flag(
        "--max-attempts",
        type=positive_int,
        default=None,
        metavar="N",
        help="stop retrying a failing request after N attempts (default: no limit)",
    ),
    HTTP_TIMEOUT.but(default=60.0, metavar="SECONDS", help="HTTP read timeout (default: %(default)s)"),
    Flag(
        "--dedup-size",
        type=positive_int,
        default=100_000,
        metavar="N",
        help="item versions remembered to filter duplicates (default: %(default)s)",
    ),
    Flag(
        "--fetch",
        action="store_true",
        help="fetch the whole object of every new item (GET URL/{id}) and write the objects instead of the feed items",
    ),
    Flag(
        "--fetch-concurrency",
        type=positive_int,
        default=8,
        metavar="N",
        help="with --fetch: object requests in flight at most (default: %(default)s)",
    ),
    Flag("--no-progress", action="store_true", help="no progress display on stderr"),
    Flag(
        "--verify",
        action="store_true",
        help="once caught up, check the copy in --out against the feed as verify does (needs --out; "
        "not with --follow); the exit status is then verify's",
    ),
)


def add_parser(subparsers: Any) -> None:
    """Register ``sync`` and its flags."""
    add_command(subparsers, "sync", run, __doc__, help=HELP, flags=FLAGS)


def _check_path(path: str, what: str) -> None:
    """A file we may create or replace: its folder exists, it is no folder."""
    if os.path.isdir(path):
        raise CommandError(f"{what} {path!r} is a directory")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise CommandError(f"{what} {path!r}: the directory {folder!r} does not exist")
    if not os.access(folder, os.W_OK):
        raise CommandError(f"{what} {path!r}: the directory {folder!r} is not writable")


class Progress:
    """The progress display: a tqdm counter of items on stderr, with pages,
    the backward crawl's state, duplicates and retries as postfix."""

    def __init__(self, enabled: bool) -> None:
        from tqdm import tqdm

        self.bar = tqdm(
            desc="sync",
            unit=" items",
            file=sys.stderr,
            disable=not enabled,
            dynamic_ncols=True,
            mininterval=0.25,
            smoothing=0.1,
        )
        self.shown = 0
        self.waiting = ""

    def update(self, stats: Any) -> None:
        self.bar.update(stats.items - self.shown)
        self.shown = stats.items
        self.waiting = ""
        self._postfix(stats)

    def retry(self, stats: Any, event: Any) -> None:
        self.waiting = f"waiting {event.wait:.1f}s ({event.reason})"
        self._postfix(stats)

    def _postfix(self, stats: Any) -> None:
        parts = [
            f"pages={stats.pages}",
            "backward=" + ("done" if stats.backward_done else "running"),
            f"dups={stats.duplicates}",
        ]
        if stats.retries:
            parts.append(f"retries={stats.retries}")
        if stats.restarts:
            parts.append(f"restarts={stats.restarts}")
        if stats.caught_up_at is not None:
            parts.append("caught up")
        if self.waiting:
            parts.append(self.waiting)
        self.bar.set_postfix_str(" ".join(parts), refresh=False)

    def write(self, message: str) -> None:
        self.bar.write(message, file=sys.stderr)

    def close(self) -> None:
        self.bar.close()


def summary(stats: Any, state_path: str, out_path: str | None) -> str:
    """The one-paragraph report printed at the end."""
    where = f" to {out_path}" if out_path else ""
    lines = [
        f"Synced {stats.items} items{where} from {stats.pages} pages "
        f"({stats.backward_pages} backward, {stats.forward_pages} forward, {stats.polls} empty polls) "
        f"in {stats.elapsed:.1f} s ({stats.items_per_second:.0f} items/s).",
        f"Duplicates filtered: {stats.duplicates}; retries: {stats.retries}; offset restarts: {stats.restarts}.",
    ]
    if stats.objects or stats.objects_missing:
        lines.append(
            f"Objects fetched: {stats.objects} ({stats.objects_per_second:.0f} objects/s); "
            f"gone (404, skipped): {stats.objects_missing}."
        )
    lines += [
        "Backward crawl: "
        + ("done" if stats.backward_done else "not done yet")
        + ("; forward crawl caught up." if stats.caught_up_at is not None else "; forward crawl not caught up.")
        + f" State file: {state_path}.",
    ]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from tqdm.contrib.logging import logging_redirect_tqdm

    from ..client import FeedError, FeedSync, FeedUnavailable, JsonLinesWriter, RetryPolicy, StateError

    if args.verify and (not args.out or args.follow):
        args.parser.error("--verify needs --out (the copy to check) and no --follow (it runs once the sync ends)")
    _check_path(args.state, "--state")
    if args.out:
        _check_path(args.out, "--out")
    retry = RetryPolicy(
        max_attempts=args.max_attempts,
        max_time=args.give_up_after or None,
    )
    writer = None
    progress = Progress(enabled=not args.no_progress)
    try:
        if args.out:
            try:
                writer = JsonLinesWriter(args.out)
            except OSError as error:
                raise CommandError(f"cannot open --out {args.out!r}: {error.strerror or error}") from None
        handler = writer if writer is not None else (lambda batch: None)
        try:
            client = FeedSync(
                args.url,
                handler,
                args.state,
                mode=args.mode or "",
                opt_fields=args.opt_fields or (),
                limit=args.limit,
                poll_interval=args.poll,
                longpoll=args.longpoll if args.follow else 0.0,
                dedup_size=args.dedup_size,
                retry=retry,
                timeout=(10.0, args.timeout),
                on_progress=progress.update,
                fetch_objects=args.fetch,
                fetch_concurrency=args.fetch_concurrency,
                on_retry=lambda event: progress.retry(client.stats, event),
            )
        except (StateError, FeedError) as error:
            raise CommandError(str(error)) from None
        if client.state.started:
            progress.write(
                f"Resuming from {args.state} ({client.state.items_handled} items handled so far; "
                f"backward crawl {'done' if client.state.backward_done else 'not done'})."
            )
        received: list[int] = []
        with client, _graceful_stop(client, received):
            try:
                with logging_redirect_tqdm():
                    stats = client.run(follow=args.follow)
            except (FeedUnavailable, FeedError, StateError, OSError) as error:
                progress.close()
                message = str(error)
                if isinstance(error, OSError) and args.out:
                    message = f"cannot write --out {args.out!r}: {error.strerror or error}"
                print(f"openprocurement-feed sync: {message}", file=sys.stderr)
                print(summary(client.stats, args.state, args.out), file=sys.stderr)
                return 1
        progress.close()
        print(summary(stats, args.state, args.out), file=sys.stderr)
        if received:
            return 130 if received[0] == signal.SIGINT else 0
    finally:
        progress.close()
        if writer is not None:
            writer.close()
    if args.verify:
        from .verify import verify

        return verify(args.url, args.out, mode=args.mode, timeout=args.timeout, concurrency=args.fetch_concurrency)
    return 0


class _graceful_stop:
    """While active, the first SIGINT/SIGTERM asks the client to stop after
    the page in hand (its state then saved); a second SIGINT interrupts at
    once. Only in the main thread (signal handlers live there)."""

    def __init__(self, client: Any, received: list[int]) -> None:
        self.client = client
        self.received = received
        self.previous: dict[int, Any] = {}

    def _handle(self, signum: int, frame: Any) -> None:
        if self.received and signum == signal.SIGINT:
            raise KeyboardInterrupt
        if not self.received:
            self.received.append(signum)
            print("\nStopping after the current page (Ctrl-C again to abort)...", file=sys.stderr)
        # Event.set takes a lock the interrupted frame may hold: set it from a thread.
        threading.Thread(target=self.client.stop, name="sync-stop", daemon=True).start()

    def __enter__(self) -> _graceful_stop:
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                self.previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)
