"""The mirror's self-check (SPEC H.4): reconcile, repair in place, record.

:func:`check_feed` reconciles one feed's rows (read from the index,
:mod:`.index`) with the feed's reconcile endpoint, repairs what differs
(a missing or stale object read with ``GET URL/{id}`` and upserted, an extra
one deleted, an object changed during the check brought to its current
version) and keeps the check's time, result and figures in ``feed_state``.
It is the library function behind ``mirror``'s checks and ``verify --db``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..copies import ReconcileResult, RoundReport
from ..reconcile import FeedReconciler
from .store import MirrorStore, Row, now_text, row_of

log = logging.getLogger(__name__)

__all__ = ["CheckReport", "check_feed", "repair_rows"]


@dataclass
class CheckReport:
    """A check as it ended: the reconciliation's result and what the repair changed."""

    result: ReconcileResult
    repaired: int = 0
    elapsed: float = 0.0

    @property
    def verdict(self) -> str:
        """``in sync`` or ``repaired`` (differences found, repaired) or ``differences``."""
        if self.result.in_sync:
            return "in sync"
        return "repaired" if self.repaired else "differences"

    def figures(self) -> dict[str, Any]:
        """What ``feed_state.last_check`` keeps."""
        result = self.result
        return {
            "until": result.until,
            "rounds": result.rounds,
            "copy_records": result.copy_records,
            "feed_records": result.feed_records,
            "missing": len(result.missing),
            "stale": len(result.stale),
            "extra": len(result.extra),
            "changed": len(result.changed),
            "repaired": self.repaired,
            "bytes_sent": result.bytes_sent,
            "bytes_received": result.bytes_received,
            "elapsed": round(self.elapsed, 3),
        }

    def line(self, feed: str) -> str:
        """The one log line of a check."""
        result = self.result
        found = f"{result.differences} difference(s)"
        if result.differences:
            found += f" ({len(result.missing)} missing, {len(result.stale)} stale, {len(result.extra)} extra)"
        changed = f", {len(result.changed)} changed during the check" if result.changed else ""
        return (
            f"check of {feed}: {self.verdict}: {result.rounds} round(s), {found}{changed}, "
            f"{self.repaired} repaired, {result.copy_records} rows against {result.feed_records} below "
            f"until={result.until}, {self.elapsed:.2f} s"
        )


def _shape(current: dict[str, Any], whole: bool, fields: Sequence[str]) -> dict[str, Any]:
    """What a row keeps of an object read whole: all of it, or its feed item."""
    if whole:
        return current
    item = {"id": current["id"], "dateModified": current["dateModified"]}
    item.update({name: current[name] for name in fields if name in current})
    return item


def repair_rows(
    reconciler: FeedReconciler,
    result: ReconcileResult,
    held: dict[str, int],
    whole: bool,
    fields: Sequence[str] = (),
) -> tuple[list[Row], dict[str, int]]:
    """What brings the copy in line with ``result``: the rows of the current
    version of every missing, stale and changed object (read again unless the
    check did), and the ids to delete with the version ``held`` at the check
    (the extra ones, and those gone meanwhile)."""
    wanted = result.missing + result.stale + result.changed
    unread = [key for key in wanted if key not in result.objects]
    objects = {**result.objects, **reconciler.read_again(unread)}
    rows: list[Row] = []
    removed: dict[str, int] = {}
    for key in wanted:
        current = objects.get(key)
        try:
            row = row_of(_shape(current, whole, fields)) if current is not None else None
        except (ValueError, KeyError):
            row = None
        if row is not None:
            rows.append(row)
        elif key in held:
            removed[key] = held[key]
    for key in result.extra:
        if key in held:
            removed[key] = held[key]
    return rows, removed


def check_feed(
    reconciler: FeedReconciler,
    store: MirrorStore,
    feed: str,
    *,
    repair: bool = True,
    whole: bool = False,
    fields: Sequence[str] = (),
    on_round: Callable[[RoundReport], None] | None = None,
    record: bool = True,
) -> CheckReport:
    """Reconcile the rows of ``feed`` with the feed of ``reconciler``, and
    with ``repair`` repair them in place (``whole``: the rows hold whole
    objects; else feed items with ``fields``). With ``record``, the check's
    time, verdict and figures go to ``feed_state``.

    :raises ReconcileError, FeedUnavailable, FeedError: the feed could not be
        read (recorded as a failed check with ``record``).
    :raises ValueError: a row has no reconcile record.
    """
    started = time.monotonic()
    copy = store.copy(feed)
    try:
        result = reconciler.run(copy, on_round=on_round)
        report = CheckReport(result)
        if repair and (result.differences or result.changed):
            rows, removed = repair_rows(reconciler, result, copy.looked_up, whole, fields)
            report.repaired = store.repair(feed, rows, removed)
    except Exception as error:
        if record:
            store.put_state_if_any(
                feed,
                {"last_check_at": now_text(), "last_check_result": "failed", "last_check": {"error": str(error)}},
            )
        raise
    report.elapsed = time.monotonic() - started
    if record:
        store.put_state_if_any(
            feed, {"last_check_at": now_text(), "last_check_result": report.verdict, "last_check": report.figures()}
        )
    log.info("%s", report.line(feed))
    return report
