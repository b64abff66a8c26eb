"""What a crawler's check costs: the figure of ``python -m benchmarks
reconcile-client --plot FILE`` (docs/reconcile.rst).

Two panels against the number of differences ``k`` (log scale): the bytes a
check sends and receives, per order (and with the stale and extra objects
read once more), beside the bytes a full crawl of the feed's items reads and
5 % of it; and the rounds the check took.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from . import pyplot, save

#: How each order is drawn (as in the orders' charts).
COLOURS = {"watermark": "tab:purple", "commit": "tab:green"}


class CostPoint(Protocol):
    """One check: what the figure reads of it."""

    order: str
    k: int
    rounds: int
    full_crawl: int
    reread_bytes: int

    @property
    def both_ways(self) -> int: ...


def plot_reconcile_cost(rows: Sequence[CostPoint], tenders: int, path: str) -> str:
    """Draw the checks of ``rows`` (a feed of ``tenders`` objects) into ``path``."""
    plt = pyplot()
    figure, (bytes_ax, rounds_ax) = plt.subplots(1, 2, figsize=(10, 4.2))
    orders = list(dict.fromkeys(row.order for row in rows))
    for order in orders:
        points = sorted(
            (max(row.k, 0.5), row.both_ways, row.rounds, row.both_ways + row.reread_bytes)
            for row in rows
            if row.order == order
        )
        colour = COLOURS.get(order, "tab:gray")
        label = "commit order" if order == "commit" else f"{order} order"
        ks = [p[0] for p in points]
        marker, size = ("s", 9) if order == "watermark" else ("o", 5)  # the orders' points often coincide
        bytes_ax.plot(ks, [p[1] for p in points], f"{marker}-", markersize=size, color=colour, label=f"check, {label}")
        bytes_ax.plot(
            ks, [p[3] for p in points], ".--", color=colour, label=f"and the stale / extra objects read again, {label}"
        )
        rounds_ax.plot(ks, [p[2] for p in points], f"{marker}-", markersize=size, color=colour, label=label)
    crawl = max((row.full_crawl for row in rows), default=0)
    if crawl:
        bytes_ax.axhline(crawl, color="tab:red", linestyle="-", label=f"full crawl of the items ({crawl / 1e6:.1f} MB)")
        bytes_ax.axhline(crawl * 0.05, color="tab:red", linestyle=":", label="5 % of the full crawl")
    bytes_ax.set_xscale("log")
    bytes_ax.set_yscale("log")
    bytes_ax.set_xlabel("differences k (log scale; k = 0 drawn at 0.5)")
    bytes_ax.set_ylabel("bytes, both ways (log scale)")
    bytes_ax.set_title(f"bytes of a check, {tenders:,} tenders", fontsize=10)
    bytes_ax.grid(True, which="both", color="0.92")
    bytes_ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2)
    rounds_ax.set_xscale("log")
    rounds_ax.set_xlabel("differences k (log scale; k = 0 drawn at 0.5)")
    rounds_ax.set_ylabel("round trips")
    rounds_ax.set_title("rounds of a check", fontsize=10)
    rounds_ax.set_ylim(0, max((row.rounds for row in rows), default=1) + 1)
    rounds_ax.yaxis.get_major_locator().set_params(integer=True)
    rounds_ax.grid(True, which="both", color="0.92")
    rounds_ax.legend(fontsize=8, loc="upper left")
    figure.tight_layout()
    return save(figure, path)
