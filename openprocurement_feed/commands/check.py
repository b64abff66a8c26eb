"""``openprocurement-feed check URL``: look for lost-document anomalies in a live feed.

Read-only. Each check takes the newest page of the feed (descending, with
public_modified), waits, reads forward again from that page's oldest item and
reports every document that appeared inside the window already served: a
crawler that had reached the window's newest item would never see it.

With --longpoll S a crawler also follows the feed forward from its head for
the whole check, long-polling (feed=longpoll&timeout=S; a server that does
not long-poll is polled every --interval). At the end the newest page is
read once more: every change on it made after the check began must have
reached the crawler (that version or a newer one) within --grace seconds
of that read, else it is reported as missed (and said whether it was
stamped behind the crawler's position: a late arrival, which a watermark
order has when a commit takes longer than W). The grace is there because a
change on the final page may be replaced by a newer version that is not
visible yet (above the watermark, or above the commit order's checkpoint):
the crawler reads on until it holds it. Only the newest page is compared:
changes pushed off it by newer ones are not verified. Ending waits for the
crawler's last request, up to S.

Works against any openprocurement-style feed URL, e.g.
https://public-api.prozorro.gov.ua/api/2.5/tenders (add ?mode=test or
?mode=_all_ to check those feeds). Exit status: 0 no anomaly, 1 anomalies
found (or changes the crawler missed), 2 the feed could not be read.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING, Any

from ..cli import CommandError
from .options import (
    HTTP_TIMEOUT,
    INTERVAL,
    MODE,
    PAGE_LIMIT,
    URL,
    Flag,
    add_command,
    non_negative_float,
    positive_float,
    positive_int,
)

if TYPE_CHECKING:
    from ..race.crawler import Crawler
    from ..race.feed import FeedClient, FeedPage

#: Checks made when neither --checks nor --duration is given.
DEFAULT_CHECKS = 20
#: Seconds between two progress lines on stderr.
PROGRESS_EVERY = 5.0
#: Seconds between two reads of the long-poll crawler during the grace.
GRACE_STEP = 0.2


#: The line in ``openprocurement-feed --help``.
HELP = "check a live feed for documents that appear inside an already-served window"
#: The command's flags, shared ones from :mod:`.options` first where they apply.
FLAGS = (
    URL,
    Flag(
        "--checks",
        type=positive_int,
        default=None,
        metavar="N",
        help=f"stop after N checks (default: {DEFAULT_CHECKS} when --duration is not given)",
    ),
    Flag(
        "--duration",
        type=positive_float,
        default=None,
        metavar="S",
        help="stop after S seconds (with --checks: whichever comes first)",
    ),
    Flag(
        "--wait",
        type=positive_float,
        default=0.5,
        metavar="S",
        help="seconds between a snapshot and its re-fetch (default: %(default)s)",
    ),
    INTERVAL.but(help="seconds between two checks (default: %(default)s)"),
    PAGE_LIMIT.but(help="page size of the snapshot and the re-fetch (default: %(default)s)"),
    MODE.but(help="check the test feed or the feed of everything (default: the URL's, else real objects)"),
    HTTP_TIMEOUT,
    Flag(
        "--longpoll",
        type=non_negative_float,
        default=0.0,
        metavar="S",
        help="also follow the feed from its head with a crawler that long-polls (feed=longpoll&timeout=S) "
        "and report the changes of the final newest page it missed; 0 for none (default: %(default)s)",
    ),
    Flag(
        "--grace",
        type=non_negative_float,
        default=5.0,
        metavar="S",
        help="with --longpoll: how long the crawler may read on after the final newest page until it holds "
        "each of its changes (a newer version of one becomes visible only after the watermark or the "
        "checkpoint passes it; give at least W in a watermark order) (default: %(default)s)",
    ),
)


def add_parser(subparsers: Any) -> None:
    """Register ``check`` and its flags."""
    add_command(subparsers, "check", run, __doc__, help=HELP, flags=FLAGS)


def run(args: argparse.Namespace) -> int:
    from ..race.detector import Detector, DetectorStats
    from ..race.feed import FeedClient, FeedError
    from ..race.report import check_summary, format_anomaly

    checks = args.checks if args.checks or args.duration else DEFAULT_CHECKS
    client = FeedClient(args.url, limit=args.limit, timeout=args.timeout, mode=args.mode)
    detector = Detector(client, wait=args.wait)
    follower: HeadCrawler | None = None
    stats = DetectorStats()
    empty = 0
    started = time.monotonic()
    deadline = started + args.duration if args.duration else None
    next_report = started + PROGRESS_EVERY
    print(f"Checking {client.url} ...", file=sys.stderr, flush=True)
    try:
        if args.longpoll:
            try:
                own = FeedClient(
                    args.url, limit=args.limit, timeout=args.timeout, mode=args.mode, longpoll=args.longpoll
                )
                follower = HeadCrawler.start_at_head(client, own, args.interval, args.grace)
            except FeedError as error:
                raise CommandError(str(error)) from None
        while True:
            try:
                result = detector.check()
            except FeedError as error:
                raise CommandError(str(error)) from None
            if result.snapshot:
                stats.add(result)
                if result.anomaly:
                    print(format_anomaly(result), flush=True)
            else:
                empty += 1
            made = stats.checks + empty
            now = time.monotonic()
            if (checks and made >= checks) or (deadline and now >= deadline):
                break
            if now >= next_report:
                next_report = now + PROGRESS_EVERY
                print(
                    f"[{now - started:5.1f} s] {stats.checks} checks, {stats.failures} with late arrivals",
                    file=sys.stderr,
                    flush=True,
                )
            pause = args.interval
            if deadline:
                pause = min(pause, max(0.0, deadline - now))
            time.sleep(pause)
        missed = 0
        if follower is not None:
            try:
                line, missed = follower.finish(client)
            except FeedError as error:
                raise CommandError(str(error)) from None
            print(line, flush=True)
    finally:
        if follower is not None:
            follower.close()
        client.close()
    print(check_summary(stats, time.monotonic() - started, empty), flush=True)
    return 1 if stats.failures or missed else 0


class HeadCrawler:
    """The ``--longpoll`` crawler: follows the feed forward from the head
    it found when the check began, in a thread of its own.

    :param crawler: the race tool's crawler, its offset at the head.
    :param start: the newest ``public_modified`` at the start (None: the
        feed was empty).
    :param grace: seconds the crawler may read on after the final newest
        page until it holds each of its changes.
    """

    def __init__(self, crawler: Crawler, start: float | None, grace: float = 5.0) -> None:
        self.crawler = crawler
        self.start = start
        self.grace = grace

    @classmethod
    def start_at_head(cls, client: FeedClient, own: FeedClient, interval: float, grace: float = 5.0) -> HeadCrawler:
        """Read the newest page with ``client`` and start a crawler forward
        from it with ``own``, a client that long-polls (every ``interval`` s
        when the server does not long-poll)."""
        from ..race.crawler import Crawler
        from ..race.feed import FeedError

        newest = client.page(None, descending=True)
        if newest.items and newest.prev_offset is None:
            own.close()
            raise FeedError(f'{client.url} returned no "prev_page" for a descending request')
        crawler = Crawler(own, poll_interval=interval, name="check-longpoll")
        crawler.offset = newest.prev_offset if newest.items else None
        crawler.start()
        return cls(crawler, max((item.public_modified for item in newest.items), default=None), grace)

    def finish(self, client: FeedClient) -> tuple[str, int]:
        """Read the newest page, let the crawler reach it, compare: the
        report line and the number of changes the crawler missed."""
        final = client.page(None, descending=True)
        crawler = self.crawler
        crawler.stop()
        crawler.join(crawler.client.longpoll + crawler.client.timeout + 5.0)
        stopped = not crawler.is_alive()
        if stopped:
            crawler.drain()  # what became visible before the final page was read
        missed = self.missed(final)
        # A change on the final page whose document changed again since is
        # out of sight until its newer version is visible (its entry moved
        # above the checkpoint, its row above the watermark): read on.
        deadline = time.monotonic() + self.grace
        while stopped and missed and time.monotonic() < deadline:
            time.sleep(GRACE_STEP)
            crawler.drain()
            missed = self.missed(final)
        log = crawler.log
        text = (
            f"Long-poll crawler: {log.deliveries} items in {log.pages} pages, {log.errors} read errors; "
            f"{len(missed)} of the newest page's changes since the start missed"
        )
        if missed:
            behind = self.behind(final, missed)
            text += ": " + ", ".join(missed[:10]) + (" ..." if len(missed) > 10 else "")
            text += (
                f" ({len(behind)} of them stamped before the newest change the crawler had been given: "
                "committed after the crawler had passed their place, as a watermark order allows when "
                "a write's commit takes longer than W)"
            )
        return text, len(missed)

    def behind(self, final: FeedPage, missed: list[str]) -> list[str]:
        """The ids among ``missed`` whose stamp is older than the newest
        stamp the crawler was given: changes that appeared behind its
        position (late arrivals, which a commit-ordered feed cannot have).
        The others were ahead of it and it failed to reach them."""
        furthest = max(self.crawler.log.newest.values(), default=float("-inf"))
        wanted = set(missed)
        return [item.id for item in final.items if item.id in wanted and item.public_modified < furthest]

    def missed(self, final: FeedPage) -> list[str]:
        """The ids of the changes on ``final`` made after the start that
        the crawler was not given (that version, or a newer one)."""
        stamps = self.crawler.log.newest
        return [
            item.id
            for item in final.items
            if (self.start is None or item.public_modified > self.start)
            and stamps.get(item.id, float("-inf")) < item.public_modified
        ]

    def close(self) -> None:
        """Stop the crawler and close its connections."""
        self.crawler.stop()
        self.crawler.client.close()
