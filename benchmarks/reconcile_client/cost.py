"""The cost table: copies of the feed's set with ``k`` differences (in the
issue's proportions: 50 missing, 50 stale, 10 extra per 110), each checked,
and what the check sent and received against the bytes of a full crawl."""

from __future__ import annotations

import math
import random
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

import requests

from openprocurement_feed.client.reconcile import FeedReconciler

from ..common import status, table
from .served import ROUND_TIMEOUT, Served

#: The differences of the cost table.
DIFFERENCES = (0, 1, 3, 10, 30, 100)
#: Pages read to measure what a page of the full crawl weighs (each costs the
#: embedded database a sort of the whole feed: minutes at 100,000 tenders).
SAMPLE_PAGES = 1
#: The page size of the full crawl the table compares with.
CRAWL_LIMIT = 1000
#: The ceiling the issue sets: the check's bytes against a full crawl's, for k <= 100.
CEILING = 0.05


@dataclass
class CostRow:
    """One check of the cost table."""

    order: str
    k: int
    rounds: int
    sent: int
    received: int
    reread: int
    reread_bytes: int
    full_crawl: int
    exact: bool
    seconds: float

    @property
    def both_ways(self) -> int:
        return self.sent + self.received

    @property
    def ratio(self) -> float:
        return self.both_ways / self.full_crawl if self.full_crawl else math.inf


def full_crawl_bytes(feed: Served, pages: int = SAMPLE_PAGES, limit: int = CRAWL_LIMIT) -> int:
    """The bytes of the feed pages a full crawl at ``limit`` reads, from
    ``pages`` pages read forward from the start (a page the loaded embedded
    database gives up on, ``503``, is asked again)."""
    sizes = []
    url: str | None = f"{feed.url}?limit={limit}"
    session = requests.Session()
    for _ in range(pages):
        assert url is not None
        for attempt in range(10):
            response = session.get(url, timeout=1800)
            if response.status_code != 503 or attempt == 9:
                break
            status(f"reconcile client, {feed.order}: a feed page answered 503; asking again")
            time.sleep(5.0)
        response.raise_for_status()
        sizes.append((len(response.content), len(response.json()["data"])))
        url = feed.server.url + response.json()["next_page"]["path"]
    session.close()
    per_item = sum(size for size, _ in sizes) / sum(items for _, items in sizes)
    total_pages = math.ceil(len(feed.versions) / limit) + 1  # and the empty page that ends the crawl
    empty = min(size for size, _ in sizes) - per_item * min(items for _, items in sizes)
    return int(per_item * len(feed.versions) + max(empty, 0) * total_pages)


def older(stamp: str) -> str:
    """A version a second older than ``stamp``."""
    return (datetime.fromisoformat(stamp) - timedelta(seconds=1)).isoformat()


def damaged(versions: dict[str, str], k: int, seed: int) -> tuple[dict[str, str], list[str], list[str], list[str]]:
    """The copy with ``k`` differences in the 50/50/10 proportions of the
    issue: the copy and its missing, stale and extra ids."""
    rng = random.Random(seed)  # nosec B311
    extra_count = round(k * 10 / 110)
    missing_count = (k - extra_count) // 2
    stale_count = k - extra_count - missing_count
    chosen = rng.sample(sorted(versions), missing_count + stale_count)
    missing, stale = sorted(chosen[:missing_count]), sorted(chosen[missing_count:])
    copy = {key: stamp for key, stamp in versions.items() if key not in missing}
    for key in stale:
        copy[key] = older(versions[key])
    extra = sorted(uuid.UUID(int=rng.getrandbits(128)).hex for _ in range(extra_count))
    oldest = min(versions.values())
    for key in extra:
        copy[key] = oldest
    return copy, missing, stale, extra


def cost_rows(feed: Served, differences: Sequence[int] = DIFFERENCES) -> list[CostRow]:
    """One check per ``k`` of ``differences`` against ``feed``."""
    rows = []
    for k in differences:
        copy, missing, stale, extra = damaged(feed.versions, k, seed=k)
        with FeedReconciler(feed.url, timeout=(10.0, ROUND_TIMEOUT)) as reconciler:
            started = time.monotonic()
            result = reconciler.run(copy.items())
            seconds = time.monotonic() - started
        exact = (result.missing, result.stale, result.extra, result.changed) == (missing, stale, extra, [])
        rows.append(
            CostRow(
                feed.order,
                k,
                result.rounds,
                result.bytes_sent,
                result.bytes_received,
                result.rechecked,
                result.recheck_bytes,
                feed.full_crawl,
                exact,
                seconds,
            )
        )
        row = rows[-1]
        status(
            f"reconcile client, {feed.order}: k={k}: {row.rounds} rounds, {row.both_ways} B both ways "
            f"({row.ratio:.2%} of a full crawl's {row.full_crawl} B), {row.reread} objects read again "
            f"({row.reread_bytes} B), exact={exact}, {seconds:.1f} s"
        )
    return rows


def kb(count: int) -> str:
    return f"{count / 1000:,.1f}"


def cost_report(rows: Sequence[CostRow], tenders: int) -> str:
    """The table of the issue's "Done when": k, rounds, bytes, full crawl, ratio."""
    body = table(
        [
            "order",
            "k",
            "rounds",
            "sent kB",
            "received kB",
            "both ways kB",
            "full crawl kB",
            "ratio",
            "re-read objects",
            "re-read kB",
            "exact",
            "s",
        ],
        [
            (
                row.order,
                row.k,
                row.rounds,
                kb(row.sent),
                kb(row.received),
                kb(row.both_ways),
                kb(row.full_crawl),
                f"{row.ratio:.2%}",
                row.reread,
                kb(row.reread_bytes),
                "yes" if row.exact else "NO",
                f"{row.seconds:.1f}",
            )
            for row in rows
        ],
    )
    within = [row for row in rows if row.k <= 100]
    verdict = all(row.ratio < CEILING for row in within) and all(row.exact for row in rows)
    return (
        f"A crawler's check of a {tenders:,}-tender feed with k differences (50 missing : 50 stale : 10 extra),\n"
        f"beside a full crawl of the feed's items at limit={CRAWL_LIMIT} (from {SAMPLE_PAGES} page(s) read):\n"
        f"{body}\n"
        f"Both ways under {CEILING:.0%} of the full crawl for every k <= 100, and every copy reported exactly: "
        f"{'yes' if verdict else 'NO'}.\n"
        "(The objects read once more, stale and extra ones, are apart: a crawler that holds whole objects\n"
        "reads them anyway to repair its copy.)"
    )
