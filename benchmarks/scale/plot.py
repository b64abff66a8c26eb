"""The figure of ``python -m benchmarks scale --plot FILE``: by feed size, a
page's database CPU (each page, both orders), the full crawl's pace over its
first and last tenth, and the times of the builds, the rematerialize and
``verify``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from .measure import OrderFigures
from .paging import DIRECTIONS, PAGES

STYLES = {"watermark": "-", "commit": "--"}


def _line(
    axis: Any, figures: Sequence[OrderFigures], order: str, value: Callable[[OrderFigures], Any], **style: Any
) -> None:
    points = [(one.size, value(one)) for one in figures if one.order == order]
    points = [(size, figure) for size, figure in points if figure]
    if points:
        axis.plot(*zip(*sorted(points), strict=True), marker="o", linestyle=STYLES[order], **style)


def page_cpu(name: str, one: OrderFigures) -> float | None:
    page = one.pages.get(name)
    return page.cpu_ms if page else None


def plot_scale(figures: Sequence[OrderFigures], path: str) -> str:
    """Draw the three panels into ``path`` (.svg or .png)."""
    from openprocurement_feed.plots import pyplot, save

    plt = pyplot()
    figure, (pages, crawl, times) = plt.subplots(1, 3, figsize=(15, 4.8))
    colours = plt.get_cmap("tab10").colors
    number = 0
    for direction, _ in DIRECTIONS:
        for page in PAGES:
            name = f"{page} {direction}"
            for order in STYLES:
                _line(
                    pages,
                    figures,
                    order,
                    partial(page_cpu, name),
                    color=colours[number],
                    label=f"{name} ({order})",
                    linewidth=1.2,
                )
            number += 1
    pages.set_ylabel("database CPU per page of 100 (ms)")
    pages.set_title("a page", fontsize=10)
    for order in STYLES:
        _line(
            crawl,
            figures,
            order,
            lambda one: one.crawl.get("first_tenth_pps"),
            color=colours[0],
            label=f"first tenth ({order})",
        )
        _line(
            crawl,
            figures,
            order,
            lambda one: one.crawl.get("last_tenth_pps"),
            color=colours[1],
            label=f"last tenth ({order})",
        )
    crawl.set_ylabel("pages per second")
    crawl.set_title("the reference crawler's full crawl", fontsize=10)
    for number, (label, value) in enumerate(
        (
            ("positions backfilled", lambda one: one.build.get("positions")),
            ("aggregates built", lambda one: one.build.get("aggregates")),
            ("rematerialize", lambda one: one.rematerialize.get("seconds")),
            ("verify", lambda one: one.verify.get("seconds")),
            ("full crawl", lambda one: one.crawl.get("seconds")),
        )
    ):
        for order in STYLES:
            if label in ("positions backfilled", "aggregates built", "rematerialize") and order == "watermark":
                continue  # one build per size (both orders), rematerialize: the commit order's
            _line(times, figures, order, value, color=colours[number], label=f"{label} ({order})")
    times.set_ylabel("seconds")
    times.set_title("builds, rematerialize, verify, crawl", fontsize=10)
    for axis in (pages, crawl, times):
        axis.set_xscale("log")
        axis.set_yscale("log")
        axis.set_xlabel("tenders in the feed")
        axis.grid(alpha=0.3, which="both")
        axis.legend(fontsize=6, loc="best")
    figure.suptitle(
        "python -m benchmarks scale: the embedded server (solid: watermark order, dashed: commit)", fontsize=11
    )
    figure.tight_layout()
    return save(figure, path)
