"""What a crawler's check costs, against what a full re-crawl reads (issue 37).

A demo feed of ``tenders`` tenders (100,000 by default; all public, stamped
over the past months, inserted into the database in batches of 5,000 once
the app runs), in each order, served over HTTP on loopback with the
reconcile endpoint.

* :func:`~.cost.cost_rows`: copies of the feed's set with ``k`` differences (in
  the issue's proportions: 50 missing, 50 stale, 10 extra per 110), made on
  the client's side so that one server serves every ``k``; for each: rounds,
  bytes sent and received (the rounds' messages and the horizon's ``GET``),
  the objects read once more (stale and extra ones, ``GET {feed}/{id}``),
  the bytes a full crawl of the feed's items reads, and the ratio. Every
  copy is checked to be reported exactly.
* :func:`~.scenario.exactness`: the issue's scenario through the command: a copy with
  50 objects removed, 50 made stale (patched on the server after the copy
  was taken) and 10 extra; ``verify`` must report exactly those, ``verify
  --repair`` must leave it in sync, and a second ``verify`` exit 0 in one
  round.

The full crawl's bytes are the bodies of the feed's pages at ``limit=1000``
(the largest page: the fewest bytes per item), measured on
:data:`SAMPLE_PAGES` pages and multiplied out to the feed's size: reading
every page of a 100,000-tender feed from the embedded database takes most of
an hour (it gathers every match of a sorted range before the limit).

One module per part: the served feed (:mod:`.served`), the cost table
(:mod:`.cost`), the scenario (:mod:`.scenario`) and the saved results
(:mod:`.results`).
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..common import status
from .cost import CRAWL_LIMIT, DIFFERENCES, CostRow, cost_report, cost_rows, full_crawl_bytes
from .results import load_results, save_results
from .scenario import exactness, exactness_report
from .served import served_feed


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
