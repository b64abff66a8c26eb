"""``openprocurement-feed run``'s periodic status: one row per feed.

Each feed's verdict, start-to-commit lag p50/p99 and checkpoint age come
from the health view's report (:func:`~openprocurement_feed.operations.health.health_report`),
its patches per second from the background writers (:class:`CountingWriter`
counts the patches acknowledged per resource). On a terminal the rows are a
small table redrawn in place (rich's ``Live``, the ``client`` extra); when
the output is not a terminal (a file, a pipe, a log collector) every
interval prints one plain line per feed.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TextIO

from ..demo.load import PatchWriter
from .monitor import VERDICT_STYLES, format_age, format_ms, parse_health

if TYPE_CHECKING:  # pragma: no cover
    from rich.live import Live


class CountingWriter(PatchWriter):
    """A background writer that counts its acknowledged patches per resource.

    :param resource_of: each target id's resource (``tenders``, ``plans``...).
    """

    def __init__(self, *args: Any, resource_of: Mapping[str, str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.resource_of = resource_of
        self.by_resource: Counter[str] = Counter()

    def acknowledged(self, tender_id: str, date_modified: str, acked: float) -> None:
        super().acknowledged(tender_id, date_modified, acked)
        self.by_resource[self.resource_of.get(tender_id, "")] += 1


@dataclass(frozen=True)
class FeedRow:
    """One feed's row of the status."""

    name: str
    verdict: str
    p50: float | None
    p99: float | None
    checkpoint_age: float | None
    patches_per_second: float | None

    def line(self, elapsed: float) -> str:
        """The row as one plain line."""
        rate = "–" if self.patches_per_second is None else f"{self.patches_per_second:.1f}"
        return (
            f"[{elapsed:6.0f} s] {self.name}: {self.verdict}; lag p50 {format_ms(self.p50)} ms, "
            f"p99 {format_ms(self.p99)} ms; checkpoint {format_age(self.checkpoint_age)}; {rate} patches/s"
        )


@dataclass
class StatusBoard:
    """Makes the rows every interval: the patch rates are counted since the
    previous call.

    :param collection_of: each written resource's collection, to give a
        feed the patches of the resource it reads.
    """

    collection_of: Mapping[str, str]
    last_counts: Counter[str] = field(default_factory=Counter)
    last_time: float = field(default_factory=time.monotonic)

    def rates(self, writers: Sequence[Any]) -> dict[str, float]:
        """Patches per second per collection since the last call."""
        counts: Counter[str] = Counter()
        for writer in writers:
            for resource, count in getattr(writer, "by_resource", {}).items():
                counts[self.collection_of.get(resource, resource)] += count
        now = time.monotonic()
        elapsed = max(now - self.last_time, 1e-9)
        rates = {name: (counts[name] - self.last_counts[name]) / elapsed for name in counts}
        self.last_counts, self.last_time = counts, now
        return rates

    def rows(self, report: Mapping[str, Any], collections: Mapping[str, str], writers: Sequence[Any]) -> list[FeedRow]:
        """One row per feed of the health ``report``; ``collections`` is
        each feed's collection."""
        rates = self.rates(writers)
        health = parse_health(report)
        return [
            FeedRow(
                feed.name,
                feed.verdict,
                feed.lag.p50,
                feed.lag.p99,
                feed.checkpoint_age,
                rates.get(collections.get(feed.name, ""), 0.0) if writers else None,
            )
            for feed in health.feeds
        ]


def status_table(rows: Sequence[FeedRow], title: str) -> Any:
    """The rows as a rich table under ``title``."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    table = Table(box=box.SIMPLE_HEAD, title=title, title_justify="left", header_style="bold", pad_edge=False)
    for name, justify in (
        ("feed", "left"),
        ("verdict", "left"),
        ("lag p50 (ms)", "right"),
        ("p99 (ms)", "right"),
        ("checkpoint", "right"),
        ("patches/s", "right"),
    ):
        table.add_column(name, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    for row in rows:
        rate = "–" if row.patches_per_second is None else f"{row.patches_per_second:.1f}"
        table.add_row(
            Text(row.name),
            Text(row.verdict, style=VERDICT_STYLES.get(row.verdict, "bold red")),
            Text(format_ms(row.p50)),
            Text(format_ms(row.p99)),
            Text(format_age(row.checkpoint_age)),
            Text(rate),
        )
    return table


class StatusOutput:
    """Where the status goes: a table redrawn in place on a terminal, plain
    lines otherwise (``terminal`` None: ask the stream)."""

    def __init__(self, stream: TextIO, terminal: bool | None = None) -> None:
        self.stream = stream
        self.terminal = stream.isatty() if terminal is None else terminal
        self.live: Live | None = None

    def show(self, elapsed: float, rows: Sequence[FeedRow], title: str) -> None:
        """Redraw the table, or print one line per feed."""
        if not self.terminal:
            for row in rows:
                print(row.line(elapsed), file=self.stream, flush=True)
            return
        table = status_table(rows, f"[{elapsed:.0f} s] {title}")
        if self.live is None:
            from rich.console import Console
            from rich.live import Live

            console = Console(file=self.stream, highlight=False, force_terminal=True)
            self.live = Live(table, console=console, auto_refresh=False)
            self.live.start(refresh=True)
        else:
            self.live.update(table, refresh=True)

    def close(self) -> None:
        """Leave the last table on the screen."""
        if self.live is not None:
            self.live.stop()
            self.live = None
