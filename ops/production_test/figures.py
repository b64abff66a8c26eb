"""The production-shaped test's figures: the crawler's summary, the loss
check, quantiles and how times are printed."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

#: The summary line of ``openprocurement-feed sync``.
SYNC_SUMMARY = re.compile(
    r"Synced (?P<items>\d+) items.* from (?P<pages>\d+) pages \((?P<backward>\d+) backward, "
    r"(?P<forward>\d+) forward, (?P<polls>\d+) empty polls\).*?Duplicates filtered: (?P<duplicates>\d+); "
    r"retries: (?P<retries>\d+); "
    r"offset restarts: (?P<restarts>\d+)\.",
    re.S,
)


@dataclass
class CrawlerFigures:
    """What ``openprocurement-feed sync`` says it did (its summary)."""

    items: int
    pages: int
    polls: int
    retries: int
    restarts: int
    duplicates: int = 0

    @property
    def requests_answered(self) -> int:
        """The 200 pages the crawler received and counted: pages with items,
        empty forward polls, and the one empty page it does not count (the
        end of the backward crawl, or an empty first page)."""
        return self.pages + self.polls + 1


def parse_sync_summary(text: str) -> CrawlerFigures | None:
    """The figures of the last summary of ``openprocurement-feed sync`` in
    ``text`` (its log), None when there is none."""
    matches = list(SYNC_SUMMARY.finditer(text))
    if not matches:
        return None
    found = matches[-1]
    return CrawlerFigures(
        items=int(found["items"]),
        pages=int(found["pages"]),
        polls=int(found["polls"]),
        retries=int(found["retries"]),
        restarts=int(found["restarts"]),
        duplicates=int(found["duplicates"]),
    )


def percentile(values: Sequence[float], share: float) -> float | None:
    """The ``share`` quantile of ``values`` (nearest rank), None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = min(len(ordered) - 1, max(0, round(share * (len(ordered) - 1))))
    return ordered[rank]


def read_versions(path: Path) -> set[tuple[str, str]]:
    """Every ``(id, dateModified)`` in a crawler's JSON-lines output."""
    versions = set()
    if path.exists():
        with open(path, encoding="utf-8") as stream:
            for line in stream:
                if line.strip():
                    item = json.loads(line)
                    versions.add((item["id"], item["dateModified"]))
    return versions


def lost_versions(
    finals: dict[str, str], received: set[tuple[str, str]], drop: int = 0
) -> tuple[list[str], list[tuple[str, str]]]:
    """The ids whose final version (``finals[id]``, the database's
    ``dateModified``) is not in ``received``; and the versions left out of
    ``received`` on purpose (``drop``: the final versions of that many
    objects, to show that the check fails)."""
    dropped = [(one, finals[one]) for one in sorted(finals)[:drop]]
    kept = received - set(dropped)
    return sorted(one for one, final in finals.items() if (one, final) not in kept), dropped


def fmt_ms(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds * 1000:.0f} ms"


def fmt_at(seconds: float | None) -> str:
    return "never" if seconds is None else f"{seconds:.1f} s"
