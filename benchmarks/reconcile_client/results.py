"""The benchmark's results saved as JSON lines, each order's as soon as it
is done, and read back to be reported (and drawn) without running."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any

from .cost import CostRow


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
