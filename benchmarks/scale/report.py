"""The one table of ``python -m benchmarks scale`` (rich, as the project's
other tables): a column per size and order, a row per figure, the issue's
goals and the ratios beside them."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from .measure import OrderFigures
from .paging import DIRECTIONS, PAGES

#: The issue's goals (issue 43, "Done when").
PAGE_CPU_GOAL = 2.0
CRAWL_GOAL = 0.7
IN_SYNC_GOAL = 2.0
AGGREGATES_GOAL = 12.0
VERIFY_SECONDS_GOAL = 60.0
VERIFY_MB_GOAL = 500.0
#: The commit feed's commit-to-visible p99 while the aggregates build (s).
VISIBLE_GOAL = 2.0
#: The sizes the ratios compare with.
PAGE_BASE = 10_000
RECONCILE_BASE = 100_000
ROLES = ("server", "web (watermark)", "web (commit)", "sequencer")


def _find(figures: Sequence[OrderFigures], size: int, order: str) -> OrderFigures | None:
    return next((one for one in figures if one.size == size and one.order == order), None)


def _seconds(value: float | None) -> str:
    """Whole seconds, or ``-`` for a step not waited for."""
    return "-" if value is None else f"{value:.0f}"


def _ratio(value: float | None, base: float | None) -> float | None:
    if value is None or base is None or base <= 0:
        return None
    return value / base


def _x(value: float | None, goal: float, at_most: bool = True) -> str:
    if value is None:
        return "-"
    ok = value <= goal if at_most else value >= goal
    return f"{value:.2f}×" + ("" if ok else " ✗")


def worst_page_ratio(figures: Sequence[OrderFigures], one: OrderFigures) -> float | None:
    """The largest page DB CPU ratio against the same page at :data:`PAGE_BASE`."""
    base = _find(figures, PAGE_BASE, one.order)
    if base is None or base is one:
        return None
    ratios = [_ratio(page.cpu_ms, base.pages[name].cpu_ms) for name, page in one.pages.items() if name in base.pages]
    found = [ratio for ratio in ratios if ratio is not None]
    return max(found) if found else None


def page_cell(name: str, one: OrderFigures) -> str:
    page = one.pages.get(name)
    return f"{page.cpu_ms:.1f} / {page.queries} / {page.examined:,}" if page else "-"


def keeper_build(one: OrderFigures) -> float | None:
    """The keeper's build alone: from its lease to the aggregates built (the
    sequencer's backfill and any recovery before it left out); from the
    sequencer's start where the lease's moment was not recorded."""
    built = one.build.get("aggregates")
    if built is None:
        return None
    return built - one.build.get("keeper", 0.0)


def visible_cell(one: OrderFigures) -> str:
    """The probe's delays while the aggregates built (the commit order's web
    process served them; the same figures in both columns of a size)."""
    build = one.build
    if not build.get("visible_probes"):
        return "-"
    if "visible_p99" not in build:
        return f"none seen ({build['visible_probes']:.0f}) ✗"
    cell = " / ".join(f"{build[name] * 1000:.0f}" for name in ("visible_p50", "visible_p99", "visible_max"))
    cell += f" ({build['visible_probes']:.0f}, {build['visible_missed']:.0f})"
    return cell + ("" if build["visible_p99"] < VISIBLE_GOAL and not build["visible_missed"] else " ✗")


def rss_cell(role: str, one: OrderFigures) -> str:
    return f"{one.rss_mb.get(role, 0):.0f}"


def rows(figures: Sequence[OrderFigures]) -> list[tuple[str, str, list[str]]]:
    """(figure, goal, a cell per column) in the table's order."""

    def each(cell: Callable[[OrderFigures], str], part: str = "") -> list[str]:
        """A cell per column; ``-`` where ``part`` (a field) was not measured."""
        return [cell(one) if not part or getattr(one, part) else "-" for one in figures]

    def against(one: OrderFigures, size: int, get: Callable[[OrderFigures], Any]) -> float | None:
        """``one``'s figure ÷ the same figure at ``size`` (None at that size itself)."""
        base = _find(figures, size, one.order)
        return None if base is None or base is one else _ratio(get(one), get(base))

    table: list[tuple[str, str, list[str]]] = [
        ("build: insert_many (s)", "", each(lambda one: _seconds(one.build.get("insert")))),
        ("build: positions backfilled (s)", "", each(lambda one: _seconds(one.build.get("positions")))),
        ("build: the keeper's build begun (s)", "", each(lambda one: _seconds(one.build.get("keeper")))),
        ("build: aggregates built (s)", "", each(lambda one: _seconds(one.build.get("aggregates")))),
        ("build: the keeper's build alone (s)", "", each(lambda one: _seconds(keeper_build(one)))),
        (
            f"aggregates' build ÷ at {RECONCILE_BASE:,}",
            f"≤ {AGGREGATES_GOAL:g}×",
            each(lambda one: _x(against(one, RECONCILE_BASE, keeper_build), AGGREGATES_GOAL)),
        ),
        (
            "commit-to-visible while they build: p50 / p99 / max ms (probes, missed)",
            f"p99 < {VISIBLE_GOAL * 1000:.0f} ms",
            each(visible_cell),
        ),
    ]
    for direction, _ in DIRECTIONS:
        for page in PAGES:
            name = f"{page} {direction}"
            table.append(
                (
                    f"page {name}: DB CPU ms / queries / docs examined",
                    "",
                    each(partial(page_cell, name)),
                )
            )
    table += [
        (
            f"page DB CPU ÷ at {PAGE_BASE:,} (worst page)",
            f"≤ {PAGE_CPU_GOAL:g}×",
            each(lambda one: _x(worst_page_ratio(figures, one), PAGE_CPU_GOAL)),
        ),
        (
            "crawl: pages / total (s)",
            "",
            each(
                lambda one: (
                    f"{one.crawl.get('pages', 0):,} / {one.crawl.get('seconds', 0):.0f}"
                    + (f" (stopped, {one.crawl.get('items', 0) / one.size:.0%})" if one.crawl.get("stopped") else "")
                ),
                "crawl",
            ),
        ),
        (
            "crawl: pages/s first / last tenth",
            "",
            each(
                lambda one: f"{one.crawl.get('first_tenth_pps', 0):.1f} / {one.crawl.get('last_tenth_pps', 0):.1f}",
                "crawl",
            ),
        ),
        (
            "crawl: last ÷ first tenth",
            f"≥ {CRAWL_GOAL:g}×",
            each(
                lambda one: _x(
                    _ratio(one.crawl.get("last_tenth_pps"), one.crawl.get("first_tenth_pps")), CRAWL_GOAL, False
                )
            ),
        ),
        ("crawler's RSS (MB)", "", each(lambda one: f"{one.crawl.get('rss_mb', 0):.0f}", "crawl")),
        (
            "rematerialize (s)",
            "",
            each(lambda one: f"{one.rematerialize['seconds']:.0f}" if one.rematerialize else "-"),
        ),
        (
            "in-sync: rounds / docs returned / ms (the copy's side too)",
            "1 round",
            each(
                lambda one: (
                    f"{one.in_sync.get('rounds', '-')} / {one.in_sync.get('documents', '-')} / "
                    f"{one.in_sync.get('seconds', 0) * 1000:.0f}"
                ),
                "in_sync",
            ),
        ),
        (
            f"in-sync docs ÷ at {RECONCILE_BASE:,}",
            f"≤ {IN_SYNC_GOAL:g}×",
            each(lambda one: _x(against(one, RECONCILE_BASE, lambda it: it.in_sync.get("documents")), IN_SYNC_GOAL)),
        ),
        (
            "verify: s / client RSS MB",
            f"≤ {VERIFY_SECONDS_GOAL:g} s, ≤ {VERIFY_MB_GOAL:g} MB",
            each(
                lambda one: (
                    f"{one.verify.get('seconds', 0):.1f} / {one.verify.get('rss_mb', 0):.0f}"
                    + ("" if one.verify.get("in_sync") else " (not in sync)")
                    + (
                        ""
                        if one.verify.get("seconds", 0) <= VERIFY_SECONDS_GOAL
                        and one.verify.get("rss_mb", 0) <= VERIFY_MB_GOAL
                        else " ✗"
                    )
                ),
                "verify",
            ),
        ),
    ]
    for role in ROLES:
        table.append((f"RSS at the end: {role} (MB)", "", each(partial(rss_cell, role))))
    return table


def render(figures: Sequence[OrderFigures], title: str, stream: Any = None) -> None:
    """Print the table on ``stream`` (stdout)."""
    from rich.console import Console
    from rich.table import Table

    stream = stream or sys.stdout
    table = Table(title=title)
    table.add_column("figure", justify="left")
    table.add_column("goal", justify="left")
    for one in figures:
        table.add_column(f"{one.size:,}\n{one.order}", justify="right")
    for name, goal, cells in rows(figures):
        table.add_row(name, goal, *cells)
    console = Console(file=stream, width=None if stream.isatty() else 220)
    console.print(table)
