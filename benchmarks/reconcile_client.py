"""What a crawler's check costs, against what a full re-crawl reads (issue 37).

A demo feed of ``tenders`` tenders (100,000 by default; all public, stamped
over the past months, inserted into the database in batches of 5,000 once
the app runs), in each order, served over HTTP on loopback with the
reconcile endpoint.

* :func:`cost_table`: copies of the feed's set with ``k`` differences (in
  the issue's proportions: 50 missing, 50 stale, 10 extra per 110), made on
  the client's side so that one server serves every ``k``; for each: rounds,
  bytes sent and received (the rounds' messages and the horizon's ``GET``),
  the objects read once more (stale and extra ones, ``GET {feed}/{id}``),
  the bytes a full crawl of the feed's items reads, and the ratio. Every
  copy is checked to be reported exactly.
* :func:`exactness`: the issue's scenario through the command: a copy with
  50 objects removed, 50 made stale (patched on the server after the copy
  was taken) and 10 extra; ``verify`` must report exactly those, ``verify
  --repair`` must leave it in sync, and a second ``verify`` exit 0 in one
  round.

The full crawl's bytes are the bodies of the feed's pages at ``limit=1000``
(the largest page: the fewest bytes per item), measured on
:data:`SAMPLE_PAGES` pages and multiplied out to the feed's size: reading
every page of a 100,000-tender feed from the embedded database takes most of
an hour (it gathers every match of a sorted range before the limit).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import math
import random
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import requests

from openprocurement_feed.client.reconcile import FeedReconciler
from openprocurement_feed.demo.server import DemoServer
from openprocurement_feed.embedded.server import EmbeddedServer

from .common import insert_public_tenders, status, table

#: The differences of the cost table.
DIFFERENCES = (0, 1, 3, 10, 30, 100)
#: Pages read to measure what a page of the full crawl weighs (each costs the
#: embedded database a sort of the whole feed: minutes at 100,000 tenders).
SAMPLE_PAGES = 1
#: The page size of the full crawl the table compares with.
CRAWL_LIMIT = 1000
#: The ceiling the issue sets: the check's bytes against a full crawl's, for k <= 100.
CEILING = 0.05
WATERMARK = 0.5
#: The HTTP read timeout of a round: the embedded database answers a round
#: that reads many cut buckets in tens of seconds at 100,000 tenders.
ROUND_TIMEOUT = 1800.0
#: Seconds to wait for the endpoint to answer for the whole seeded set.
READY_TIMEOUT = 1800.0


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


@dataclass
class Served:
    """A seeded feed being served."""

    order: str
    server: DemoServer
    versions: dict[str, str]
    full_crawl: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return self.server.api_url + "/tenders"


def seed_public_tenders(collection: Any, count: int, seed: int = 1) -> dict[str, str]:
    """Insert ``count`` real-shaped public tenders stamped over the past
    months, a minute apart, as the store stamps them; their id → dateModified."""
    rng = random.Random(seed)  # nosec B311 - sample documents
    start = datetime.now(timezone.utc) - timedelta(days=120)
    moments = (start + timedelta(seconds=number * 60, microseconds=rng.randint(0, 999_999)) for number in range(count))
    return insert_public_tenders(collection, moments, rng, status="active", batch_size=5000)


@contextlib.contextmanager
def served_feed(order: str, tenders: int, folder: Path, aggregates: bool = True) -> Iterator[Served]:
    """The demo app in ``order`` on a fresh database, then ``tenders``
    tenders inserted behind its back (its follower builds the aggregates
    from the change stream, as it keeps them day to day), once its reconcile
    endpoint answers for all of them."""
    from pymongo import MongoClient

    with EmbeddedServer(str(folder / f"db-{order}")) as database:
        settings = {
            "mongodb.uri": database.uri,
            "mongodb.db_name": "reconcile_bench",
            "feed.watermark_seconds": str(WATERMARK),
            "feed.order": order,
            "feed.sequencer": "thread",
            "demo.write_delay_ms": "0",
            "feed.reconcile_aggregates": "true" if aggregates else "false",
        }
        server = DemoServer(settings, threads=8).start()
        try:
            wait_ready(server, {}, order)
            client: MongoClient[Any] = MongoClient(database.uri)
            started = time.monotonic()
            versions = seed_public_tenders(client["reconcile_bench"]["tenders"], tenders)
            client.close()
            status(f"reconcile client, {order}: {tenders} tenders inserted in {time.monotonic() - started:.0f} s")
            wait_ready(server, versions, order)
            yield Served(order, server, versions)
        finally:
            server.close()


def answers_rounds(server: DemoServer, versions: dict[str, str]) -> bool:
    """Whether a check of the whole set goes through (no ``503`` while the
    aggregates catch up)."""
    from openprocurement_feed.client import FeedUnavailable

    try:
        with FeedReconciler(server.api_url + "/tenders", timeout=(10.0, ROUND_TIMEOUT)) as reconciler:
            reconciler.run(versions.items(), recheck=False)
    except FeedUnavailable:
        return False
    return True


def wait_ready(server: DemoServer, versions: dict[str, str], order: str, timeout: float = READY_TIMEOUT) -> None:
    """Wait until the endpoint's horizon covers the seeded records and its
    rounds answer."""
    count = len(versions)
    url = server.api_url + "/feeds/tenders/reconcile"
    started = time.monotonic()
    last = ""
    while True:
        response = requests.get(url, timeout=600)
        seen = f"HTTP {response.status_code}"
        if response.status_code == 200:
            records = response.json().get("records")
            if records == count and answers_rounds(server, versions):
                status(
                    f"reconcile client, {order}: the endpoint answers for {count} records "
                    f"after {time.monotonic() - started:.0f} s"
                )
                return
            seen += f", {records} records"
        if seen != last:
            status(f"reconcile client, {order}: waiting for the endpoint ({seen})")
            last = seen
        if time.monotonic() - started > timeout:
            raise RuntimeError(f"the reconcile endpoint did not answer for {count} records within {timeout:.0f} s")
        time.sleep(2.0)


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


def _kb(count: int) -> str:
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
                _kb(row.sent),
                _kb(row.received),
                _kb(row.both_ways),
                _kb(row.full_crawl),
                f"{row.ratio:.2%}",
                row.reread,
                _kb(row.reread_bytes),
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


# -- the scenario, through the command ---------------------------------


def _verify(argv: list[str]) -> tuple[int, dict[str, Any]]:
    """``openprocurement-feed verify ... --json``: its status and JSON (stderr kept quiet)."""
    from openprocurement_feed.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["verify", *argv, "--json", "--timeout", str(ROUND_TIMEOUT)])
    try:
        return code, json.loads(out.getvalue())
    except ValueError:
        raise RuntimeError(f"verify printed no JSON (exit {code}): {err.getvalue()[-2000:]}") from None


def exactness(feed: Served, folder: Path) -> dict[str, Any]:
    """50 removed, 50 stale, 10 extra: reported exactly, repaired, in sync in one round."""
    rng = random.Random(37)  # nosec B311
    keys = sorted(feed.versions)
    chosen = rng.sample(keys, 100)
    removed, patched = sorted(chosen[:50]), sorted(chosen[50:])
    extra = sorted(uuid.UUID(int=rng.getrandbits(128)).hex for _ in range(10))
    path = folder / f"copy-{feed.order}.jsonl"
    with path.open("w", encoding="utf-8") as stream:
        for key, stamp in feed.versions.items():
            if key not in removed:
                stream.write(json.dumps({"id": key, "dateModified": stamp}) + "\n")
        for key in extra:
            stream.write(json.dumps({"id": key, "dateModified": min(feed.versions.values())}) + "\n")
    session = requests.Session()
    newest = ""
    for key in patched:  # the copy is now stale for these
        response = session.patch(f"{feed.url}/{key}", json={"data": {"title": f"patched {key}"}}, timeout=600)
        response.raise_for_status()
        newest = max(newest, response.json()["data"]["dateModified"])
    session.close()
    wait_below_horizon(feed, newest)
    first_code, first = _verify([feed.url, "--items", str(path)])
    exact = (first["missing"], first["stale"], first["extra"], first["changed"]) == (removed, patched, extra, [])
    repair_code, repaired = _verify([feed.url, "--items", str(path), "--repair"])
    second_code, second = _verify([feed.url, "--items", str(path)])
    return {
        "order": feed.order,
        "first": first,
        "first_code": first_code,
        "exact": exact,
        "repair_code": repair_code,
        "repaired": repaired,
        "second_code": second_code,
        "second": second,
    }


def wait_below_horizon(feed: Served, stamp: str, timeout: float = 600.0) -> None:
    """Wait until the feed's horizon is above ``stamp``.

    The commit order's horizon is its checkpoint, which moves with the next
    write to the collection: on a feed that no one writes to any more, a
    draft (never public, in neither set) is written every second meanwhile.
    """
    from openprocurement_feed.reconcile.records import timestamp_us

    target = timestamp_us(stamp)
    deadline = time.monotonic() + timeout
    collection = feed.server.registry.feed_store.collection("tenders")
    while True:
        response = requests.get(feed.server.api_url + "/feeds/tenders/reconcile", timeout=600)
        if response.status_code == 200 and response.json()["until"] > target:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"the horizon did not pass {stamp} within {timeout:.0f} s")
        now = datetime.now(timezone.utc)
        collection.insert_one(
            {
                "_id": uuid.uuid4().hex,
                "status": "draft",
                "dateModified": now.isoformat(),
                "public_modified": round(now.timestamp(), 3),
                "is_public": False,
                "is_test": False,
            }
        )
        time.sleep(1.0)


def exactness_report(runs: Sequence[dict[str, Any]], tenders: int) -> str:
    rows = []
    for run in runs:
        first, repaired, second = run["first"], run["repaired"], run["second"]
        rows.append(
            (
                run["order"],
                f"{len(first['missing'])}/{len(first['stale'])}/{len(first['extra'])}/{len(first['changed'])}",
                "yes" if run["exact"] else "NO",
                run["first_code"],
                first["rounds"],
                _kb(first["bytes_sent"] + first["bytes_received"]),
                run["repair_code"],
                second["rounds"],
                run["second_code"],
                "yes"
                if run["exact"]
                and run["first_code"] == 1
                and run["second_code"] == 0
                and second["rounds"] == 1
                and repaired.get("in_sync")
                else "NO",
            )
        )
    body = table(
        [
            "order",
            "missing/stale/extra/changed",
            "exact",
            "exit",
            "rounds",
            "kB both ways",
            "repair exit",
            "2nd rounds",
            "2nd exit",
            "done",
        ],
        rows,
    )
    return f"verify on a {tenders:,}-tender feed: 50 removed, 50 stale, 10 extra; --repair; verify again:\n{body}"


def save_results(path: str, rows: Sequence[CostRow], runs: Sequence[dict[str, Any]]) -> None:
    """Append an order's rows and scenario to ``path`` (JSON lines)."""
    with open(path, "a", encoding="utf-8") as stream:
        for row in rows:
            stream.write(json.dumps({"row": dataclasses.asdict(row)}) + "\n")
        for one in runs:
            stream.write(json.dumps({"scenario": one}) + "\n")


def load_results(paths: Sequence[str]) -> tuple[list[CostRow], list[dict[str, Any]]]:
    """The rows and scenarios :func:`save_results` wrote to ``paths``."""
    rows: list[CostRow] = []
    runs: list[dict[str, Any]] = []
    for path in paths:
        with open(path, encoding="utf-8") as stream:
            for line in stream:
                entry = json.loads(line)
                if "row" in entry:
                    rows.append(CostRow(**entry["row"]))
                else:
                    runs.append(entry["scenario"])
    return rows, runs


def run(
    tenders: int = 100_000,
    orders: Sequence[str] = ("watermark", "commit"),
    differences: Sequence[int] = DIFFERENCES,
    scenario: bool = True,
    plot: str | None = None,
    save: str | None = None,
    load: Sequence[str] = (),
    aggregates: bool = True,
) -> list[CostRow]:
    """Print the cost table and the scenario's result for each order (and
    draw the figure into ``plot``). ``save``: also append each order's
    results to that file as soon as the order is done (so that the orders
    can run in two processes side by side); ``load``: report and draw the
    results saved in those files instead of running. ``aggregates=False``
    serves the feed without the follower's aggregates (the endpoint reads
    the feed's records for every round): the messages, and so every figure
    of the client, are the same byte for byte (they follow from the two
    sets, not from how the server finds them), and the run does not wait
    for the aggregates' build."""
    rows: list[CostRow] = []
    runs: list[dict[str, Any]] = []
    if load:
        rows, runs = load_results(load)
    else:
        with tempfile.TemporaryDirectory(prefix="reconcile-client-bench-") as name:
            folder = Path(name)
            for order in orders:
                with served_feed(order, tenders, folder, aggregates) as feed:
                    feed.full_crawl = full_crawl_bytes(feed)
                    status(f"reconcile client, {order}: a full crawl at limit={CRAWL_LIMIT} reads {feed.full_crawl} B")
                    order_rows = cost_rows(feed, differences)
                    order_runs = [exactness(feed, folder)] if scenario else []
                rows.extend(order_rows)
                runs.extend(order_runs)
                print(cost_report(order_rows, tenders), flush=True)
                if order_runs:
                    print(exactness_report(order_runs, tenders), flush=True)
                if save:
                    save_results(save, order_rows, order_runs)
    if len(orders) > 1 or load:
        print(cost_report(rows, tenders), flush=True)
        if runs:
            print(exactness_report(runs, tenders), flush=True)
    if plot:
        from openprocurement_feed.plots.reconcile import plot_reconcile_cost

        print(f"Written: {plot_reconcile_cost(rows, tenders, plot)}")
    return rows
