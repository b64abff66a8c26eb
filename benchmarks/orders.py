"""What the commit order costs the database beside the watermark order.

The seed's load (SPEC D.12), over real HTTP, on **one** embedded server: the
demo API on waitress (16 threads), 70 small and 70 large tenders, 6 writers
paced to 80 patches/s with every write held open 5-40 ms after its stamp,
one crawler following ``next_page``. The same load runs alternately
(ABBA: the server's cost per write drifts up over a run) in watermark order
(``W = 1 s``) and in commit order (the in-process sequencer,
``feed.sequencer = thread``, as ``make run``), each on a database of its own
on the same server, ``--rounds`` times; then the hot scenario (30 tenders,
160 patches/s asked) ``--hot-rounds`` times in each order, alternating as well
(commit first in the first round).

Per run it prints the patches/s reached, the **database process's CPU per
patch** (its CPU time over the write window, crawler and sequencer included,
divided by the acknowledged patches), the crawler's feed delay (from a
patch's acknowledgement to the crawler holding that version) and the
tenders lost; then the ratios commit / watermark of the medians over the
rounds. ``python -m benchmarks orders`` (or ``make bench ARGS=orders``).

Last, the **web process's CPU per page** of the two orders on the same data
(``--docs`` tenders, in process through WebTest): the demo serves its
tenders feed in commit order and, beside it, the same collection in
watermark order (``demo.both_orders``); the second page of each at limits
100 and 1000 is fetched in loops, interleaved, and the calling thread's CPU
per page (:func:`time.thread_time`: the view, the driver's encoding and
decoding, the rendering) is the median of the rounds.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from pymongo import MongoClient

from openprocurement_feed.demo import main
from openprocurement_feed.embedded.server import EmbeddedServer
from openprocurement_feed.race.config import RaceConfig
from openprocurement_feed.race.experiment import run_once
from openprocurement_feed.race.results import RunResult

from .common import seed_tenders, status, table
from .feed_cost import cpu_per_call

#: The seed's load, as SPEC D.12 and the race experiment describe it.
LOAD = dict(writers=6, rate=80.0, small=70, large=70, write_delay="5-40", threads=16, detector=False, longpoll=0.0)
#: The hot scenario: 30 tenders rewritten at 160 patches/s asked, writes held 5-40 ms.
HOT = dict(
    writers=8, rate=160.0, small=30, large=0, write_delay="5-40", threads=16, detector=False, hot=True, longpoll=0.0
)
WATERMARK = 1.0
ORDERS = ("watermark", "commit")


#: With ``--plot``: a long-poll crawler beside the polling one, for the delay chart.
LONGPOLL_SECONDS = 10.0


def one_run(
    database: EmbeddedServer, order: str, seconds: float, hot: bool = False, longpoll: bool = False
) -> RunResult:
    """One run of the load in ``order`` on its own database of ``database``
    (``longpoll``: with a long-poll crawler too)."""
    load = dict(HOT if hot else LOAD)
    if longpoll:
        load["longpoll"] = LONGPOLL_SECONDS
    config = RaceConfig(
        duration=seconds,
        watermarks=(WATERMARK,),
        sequencer="thread",
        mongodb_uri=database.uri,
        database_pid=database.process.pid if database.process is not None else None,
        **load,  # type: ignore[arg-type]
    )
    result = run_once(config, WATERMARK if order == "watermark" else 0.0, status, order=order)
    return result


def _median(values: Sequence[float | None]) -> float | None:
    known = [value for value in values if value is not None]
    return statistics.median(known) if known else None


def _cell(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _ratio(commit: float | None, watermark: float | None) -> str:
    if commit is None or not watermark:
        return "-"
    return f"{commit / watermark:.2f}"


def _figure(results: Sequence[RunResult], pick: str) -> float | None:
    """One figure over the runs of an order: the median patches/s
    (``rate``), database CPU per patch (``cpu``) or feed delay percentile
    (``median``, ``p99``), or the worst ``invisible`` time."""
    if pick == "invisible":
        return max((r.longest_invisible_s for r in results if r.longest_invisible_s is not None), default=None)
    if pick == "rate":
        return _median([result.patches_per_second for result in results])
    if pick == "cpu":
        return _median([result.database_cpu_ms_per_patch for result in results])
    return _median([result.feed_delay_ms.get(pick) for result in results])


def _summary(title: str, runs: dict[str, list[RunResult]], figures: Sequence[tuple[str, str]]) -> str:
    """A table of ``figures`` (label, :func:`_figure`'s pick) per order and
    their ratio commit / watermark."""
    rows = []
    for label, pick in figures:
        watermark, commit = (_figure(runs.get(order, []), pick) for order in ORDERS)
        rows.append([label, _cell(watermark, 2), _cell(commit, 2), _ratio(commit, watermark)])
    return table([title, "watermark", "commit", "commit / watermark"], rows)


def orders_report(runs: dict[str, list[RunResult]], hot: dict[str, list[RunResult]], seconds: float) -> str:
    """The runs and the ratios, as tables."""
    rows = []
    for order in ORDERS:
        for number, result in enumerate(runs[order], 1):
            delay = result.feed_delay_ms
            rows.append(
                [
                    f"{order} #{number}",
                    f"{result.patches_per_second:.1f}",
                    _cell(result.database_cpu_ms_per_patch, 2),
                    _cell(delay.get("median"), 0),
                    _cell(delay.get("p99"), 0),
                    result.lost,
                    result.write_conflicts,
                ]
            )
    body = table(["run", "patches/s", "db CPU ms/patch", "delay p50 ms", "delay p99 ms", "lost", "conflicts"], rows)

    summary = _summary(
        "figure (median of rounds)",
        runs,
        (
            ("patches/s reached", "rate"),
            ("database CPU per patch (ms)", "cpu"),
            ("feed delay p50 (ms)", "median"),
            ("feed delay p99 (ms)", "p99"),
        ),
    )
    text = (
        f"The seed's load on one embedded server, {seconds:g} s per run, orders alternating "
        f"({LOAD['writers']} writers at {LOAD['rate']:g} patches/s asked, {LOAD['small']} small + "
        f"{LOAD['large']} large tenders, writes held {LOAD['write_delay']} ms, one crawler; "
        f"W = {WATERMARK:g} s; commit order with the in-process sequencer):\n{body}\n\n{summary}\n"
        "db CPU = the database process's CPU time over the write window / acknowledged patches "
        "(the writers' own work, the crawler's pages and the sequencer's reads and writes); "
        "delay = from a patch's acknowledgement to the crawler holding that version; "
        "lost = tenders whose final version the crawler never saw (0 expected)."
    )
    if any(hot.values()):
        hot_rows = [
            [
                f"{order} #{number}",
                f"{result.patches_per_second:.1f}",
                _cell(result.database_cpu_ms_per_patch, 2),
                _cell(result.longest_invisible_s, 2),
                result.lost,
            ]
            for order in ORDERS
            for number, result in enumerate(hot.get(order, ()), 1)
        ]

        hot_summary = _summary(
            "hot figure",
            hot,
            (
                ("patches/s reached (median)", "rate"),
                ("database CPU per patch (ms, median)", "cpu"),
                ("longest invisible (s, worst run)", "invisible"),
            ),
        )
        text += (
            f"\n\nHot documents: {HOT['small']} tenders, {HOT['rate']:g} patches/s asked by "
            f"{HOT['writers']} writers, writes held {HOT['write_delay']} ms, orders alternating:\n"
            + table(["run", "patches/s", "db CPU ms/patch", "longest invisible (s)", "lost"], hot_rows)
            + "\n\n"
            + hot_summary
            + "\nlongest invisible = the longest time an acknowledged change stayed out of the "
            "crawler's sight (until it held that version or a newer one)."
        )
    return text


#: The page sizes of the web CPU figure.
PAGE_LIMITS = (100, 1000)
PAGE_DB = "bench_orders_pages"


def page_cpu(
    database: EmbeddedServer, docs: int = 3000, iterations: int = 10, rounds: int = 5
) -> list[tuple[int, int, float, float]]:
    """Per limit: items per page and the median CPU ms per page of the
    commit-ordered and the watermark-ordered feed of the same collection."""
    from webtest import TestApp

    client: MongoClient[Any] = MongoClient(database.uri, tz_aware=True)
    client.drop_database(PAGE_DB)
    status(f"orders: seeding {docs} tenders for the page figures")
    seed_tenders(client[PAGE_DB].tenders, docs)
    settings = {
        "mongodb.uri": database.uri,
        "mongodb.db_name": PAGE_DB,
        "feed.order": "commit",
        "feed.sequencer": "thread",
        "feed.watermark_seconds": "1",
        "demo.both_orders": "true",
    }
    app = TestApp(main({}, **settings))
    registry = app.app.registry
    try:
        if not registry.feed_sequencer.wait_ready(120.0):
            raise RuntimeError("the sequencer did not backfill the seeded tenders in time")
        rows = []
        for limit in PAGE_LIMITS:
            paths = {}
            for order, feed in (("commit", "tenders"), ("watermark", "tenders-watermark")):
                first = app.get(f"/api/2.5/{feed}?limit={limit}").json
                paths[order] = first["next_page"]["path"]
            items = len(app.get(paths["commit"]).json["data"])
            for path in paths.values():  # warm up
                app.get(path)
            cpu: dict[str, list[float]] = {order: [] for order in paths}
            status(f"orders: web CPU per page, limit={limit}, {rounds} rounds of {iterations} pages per order")
            for _ in range(rounds):
                for order, path in paths.items():
                    cpu[order].append(cpu_per_call(lambda path=path: app.get(path), iterations)[1] * 1000)
            rows.append((limit, items, statistics.median(cpu["commit"]), statistics.median(cpu["watermark"])))
        return rows
    finally:
        from openprocurement_feed import shutdown

        shutdown(registry)
        client.drop_database(PAGE_DB)
        client.close()


def page_report(rows: Sequence[tuple[int, int, float, float]], docs: int) -> str:
    """The web CPU figure as a table."""
    body = table(
        ["limit", "items", "commit page CPU ms", "watermark page CPU ms", "commit / watermark"],
        [
            [limit, items, f"{commit:.2f}", f"{watermark:.2f}", _ratio(commit, watermark)]
            for limit, items, commit, watermark in rows
        ],
    )
    return (
        f"Web process CPU per page ({docs} tenders, the second page, in process through WebTest; "
        "the calling thread's CPU, median of the rounds):\n" + body
    )


def run(seconds: float = 20.0, rounds: int = 2, hot_rounds: int = 2, docs: int = 3000, plot: str | None = None) -> None:
    """Measure and print the side-by-side figures (``hot_rounds=0``: no
    hot-documents runs; ``plot``: draw the charts into that folder, the
    runs with a long-poll crawler too)."""
    longpoll = plot is not None
    with EmbeddedServer() as database:
        runs: dict[str, list[RunResult]] = {order: [] for order in ORDERS}
        for number in range(rounds):
            # ABBA: the server's cost per write drifts up over a long run
            # (its oplog and catalogue grow), so neither order always goes first
            for order in ORDERS if number % 2 == 0 else ORDERS[::-1]:
                status(f"orders: round {number + 1}/{rounds}, {order} order")
                runs[order].append(one_run(database, order, seconds, longpoll=longpoll))
        hot_runs: dict[str, list[RunResult]] = {order: [] for order in ORDERS}
        for number in range(hot_rounds):
            # alternating too: a single pair would always give the second
            # order the more worn server
            for order in ORDERS[::-1] if number % 2 == 0 else ORDERS:
                status(f"orders: hot round {number + 1}/{hot_rounds}, {order} order")
                hot_runs[order].append(one_run(database, order, seconds, hot=True, longpoll=longpoll))
        pages = page_cpu(database, docs)
    print(orders_report(runs, hot_runs, seconds), flush=True)
    print("\n" + page_report(pages, docs), flush=True)
    if plot is not None:
        from openprocurement_feed.plots.orders import plot_orders

        print(orders_delay_report(runs), flush=True)
        for path in plot_orders(runs, hot_runs, plot):
            print(f"Chart written to {path}", flush=True)


def orders_delay_report(runs: dict[str, list[RunResult]]) -> str:
    """The delay chart's figures: per order and crawler, the versions and
    their delay's median and p99 (every round pooled)."""
    from openprocurement_feed.race.results import delay_summary

    rows = []
    for order in ORDERS:
        for crawler in ("polling", "longpoll"):
            delays = sorted(value for result in runs[order] for value in result.delays.get(crawler, ()))
            summary = delay_summary(delays)
            rows.append([order, crawler, summary["count"], _cell(summary["median"], 0), _cell(summary["p99"], 0)])
    return "\nDelay chart (rounds pooled):\n" + table(["order", "crawler", "versions", "p50 ms", "p99 ms"], rows)
