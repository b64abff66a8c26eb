"""How the soak prints: a block of lines every minute, and at the end the
slopes and verdicts as a table (rich, as the project's other tables)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from .figures import Sample, Verdict


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _size(value: int) -> str:
    if value >= 10 * 2**20:
        return f"{value / 2**20:.1f} MB"
    return f"{value / 2**10:.0f} KB"


def minute_lines(sample: Sample) -> list[str]:
    """The lines of one minute's sample."""
    errors = ", ".join(f"{status}: {count}" for status, count in sorted(sample.errors.items())) or "none"
    head = (
        f"[{sample.minute:5.1f} min] changes {sample.changes:,} ({sample.rate:.1f}/s; creates {sample.creates:,}) | "
        f"commit-to-visible p50/p99 {_ms(sample.lag_p50_ms)}/{_ms(sample.lag_p99_ms)} ms "
        f"(polling p99 {_ms(sample.poll_p99_ms)}) | sequencer lag p99 {_ms(sample.sequencer_p99_ms)} ms | "
        f"requests {sample.requests:,}, p99 {_ms(sample.request_p99_ms)} ms, 5xx {errors} | "
        f"db connections {sample.connections if sample.connections is not None else '-'} | "
        f"machine load {_ms(sample.load) if sample.load is None else f'{sample.load:.1f}'} | verdict {sample.verdict}"
    )
    rss = "  ".join(f"{role} {rss:.1f}" for role, (rss, _) in sample.processes.items())
    fds = "  ".join(f"{role} {fds}" for role, (_, fds) in sample.processes.items())
    collections = "  ".join(
        f"{name.split('.', 1)[1] if name.startswith('openprocurement.') else name} {docs:,}/{_size(size)}"
        for name, (docs, size) in sorted(sample.collections.items())
    )
    return [head, f"    RSS MB: {rss}", f"    fds:    {fds}", f"    docs/bytes: {collections}"]


def print_minute(sample: Sample) -> None:
    for line in minute_lines(sample):
        print(line, flush=True)


def _number(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def print_verdicts(verdicts: Sequence[Verdict], extra: Sequence[tuple[str, str, bool]]) -> bool:
    """The table of ``verdicts`` and the ``extra`` rows (criterion, figure,
    ok); True when none failed."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title="The steady state after the warm-up (slopes: least squares, per hour)")
    for column, justify in (
        ("criterion", "left"),
        ("series", "left"),
        ("first", "right"),
        ("last", "right"),
        ("slope/h", "right"),
        ("limit", "left"),
        ("verdict", "left"),
        ("note", "left"),
    ):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for verdict in verdicts:
        style = {True: "", False: "bold red", None: "dim"}[verdict.ok]
        table.add_row(
            verdict.criterion,
            verdict.series,
            _number(verdict.first),
            _number(verdict.last),
            _number(verdict.slope, 2),
            verdict.limit,
            verdict.word,
            verdict.note,
            style=style,
        )
    for criterion, figure, ok in extra:
        table.add_row(criterion, "", "", "", "", "", "ok" if ok else "FAIL", figure, style="" if ok else "bold red")
    # a log file gets the whole table: wide enough for every column
    console = Console(file=sys.stdout, width=None if sys.stdout.isatty() else 200)
    console.print(table)
    return all(v.ok is not False for v in verdicts) and all(ok for _, _, ok in extra)
