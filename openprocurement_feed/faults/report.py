"""The matrix as a table (``rich`` on a terminal, plain text otherwise) and as JSON."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import IO, Any

from .result import BROKEN, FAILED, MISSED, CellResult

COLUMNS = (
    "order",
    "fault",
    "target",
    "struck",
    "answers",
    "lost",
    "dup",
    "no answer (s)",
    "recover (s)",
    "verdict",
    "outcome",
)


def short_target(name: str) -> str:
    """A role's ``appName`` without the package's prefix."""
    return name.removeprefix("openprocurement-feed-")


def row(result: CellResult) -> tuple[str, ...]:
    """The table's cells of one result."""
    answers = " ".join(f"{status}×{count}" for status, count in result.answers.items())
    return (
        result.order,
        result.cell.rsplit(" ", 2)[0] + " " + result.cell.rsplit(" ", 1)[1],
        f"{short_target(result.target)}:{result.command}",
        "-" if result.struck is None else str(result.struck),
        answers,
        str(result.lost),
        str(result.duplicates),
        f"{result.longest_unanswered_s:.1f}",
        "-" if result.recovery_s is None else f"{result.recovery_s:.1f}",
        result.verdict or "-",
        result.outcome,
    )


def plain_table(results: Sequence[CellResult]) -> str:
    """The table in plain text, columns padded."""
    rows = [COLUMNS, *(row(result) for result in results)]
    widths = [max(len(cells[column]) for cells in rows) for column in range(len(COLUMNS))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(cells, widths, strict=True)).rstrip() for cells in rows]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)


def print_table(results: Sequence[CellResult], stream: IO[str]) -> None:
    """The table on ``stream``: drawn by ``rich`` on a terminal, plain otherwise."""
    if not stream.isatty():
        print(plain_table(results), file=stream)
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(*COLUMNS, title="The fault matrix")
    for result in results:
        style = "red" if result.outcome in FAILED else "yellow" if result.lost else None
        table.add_row(*row(result), style=style)
    Console(file=stream).print(table)


def problems(results: Sequence[CellResult]) -> list[str]:
    """One line per broken or missed cell: its outcome, order, name and problems."""
    return [
        f"{result.outcome.upper()} [{result.order}] {result.cell}: " + "; ".join(result.problems)
        for result in results
        if result.outcome in FAILED
    ]


def matrix_json(results: Sequence[CellResult], seconds: float) -> str:
    """The run as JSON: its time and one object per cell."""
    body: dict[str, Any] = {
        "seconds": round(seconds, 1),
        "broken": sum(1 for result in results if result.outcome == BROKEN),
        "missed": sum(1 for result in results if result.outcome == MISSED),
        "cells": [result.to_dict() for result in results],
    }
    return json.dumps(body, indent=2)
