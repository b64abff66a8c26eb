"""What a check of a copy prints (``verify --items``, ``verify --db``): a
line per round while it runs and the report at its end."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from ..client.reconcile import ReconcileResult, RoundReport

__all__ = ["round_printer", "summary"]


def round_printer(label: str, err: TextIO) -> Callable[[RoundReport], None]:
    """Prints a progress line on ``err`` for each round of a check."""

    def progress(report: RoundReport) -> None:
        print(
            f"{label}round {report.round}: sent {_size(report.sent)}, received {_size(report.received)}; "
            f"so far {report.need} id(s) only the feed has, {report.have} only the copy has "
            f"({report.elapsed:.2f} s)",
            file=err,
            flush=True,
        )

    return progress


def _size(count: int) -> str:
    """Bytes as the summary shows them: ``812 B``, ``13.4 kB``, ``2.1 MB``."""
    if count < 1000:
        return f"{count} B"
    if count < 1_000_000:
        return f"{count / 1000:.1f} kB"
    return f"{count / 1_000_000:.1f} MB"


def _ids(ids: list[str], limit: int = 20) -> str:
    shown = ", ".join(ids[:limit])
    return shown + (f", ... ({len(ids) - limit} more)" if len(ids) > limit else "")


def summary(result: ReconcileResult, repaired: bool = False) -> str:
    """The report printed at the end (the lists cut at 20 ids: --json has them all)."""
    verdict = "In sync" if result.in_sync else f"{result.differences} difference(s)"
    if repaired:
        verdict += " after the repair"
    lines = [
        f"{verdict}: {result.copy_records} objects of the copy against {result.feed_records} of the feed "
        f"below until={result.until}.",
        f"{result.rounds} round(s), {_size(result.bytes_sent)} sent, {_size(result.bytes_received)} received; "
        f"{result.rechecked} object(s) read again ({_size(result.recheck_bytes)}); {result.elapsed:.2f} s.",
    ]
    for name, ids in (
        ("Missing", result.missing),
        ("Stale", result.stale),
        ("Extra", result.extra),
        ("Changed during the check", result.changed),
    ):
        if ids:
            lines.append(f"{name} ({len(ids)}): {_ids(ids)}")
    return "\n".join(lines)
