"""Text output of the race experiment and of the feed checker."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, timezone

from .detector import CheckResult, DetectorStats
from .experiment import RunResult

#: Snapshot items shown around the window's edges in an anomaly report.
SHOWN_SNAPSHOT_ITEMS = 3


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def _lags(result: RunResult) -> str:
    lags = result.lag_summary
    if lags["min"] is None:
        return "-"
    return f"{_ms(lags['min'])} / {_ms(lags['max'])} / {_ms(lags['mean'])}"


def _delay(result: RunResult) -> str:
    delay = result.feed_delay_ms
    if delay.get("median") is None:
        return "-"
    p99 = delay.get("p99")
    middle = f" / {p99:.0f}" if p99 is not None else ""
    return f"{delay['median']:.0f}{middle} / {delay['max']:.0f}"


def _median_p99(delay: dict[str, float | None]) -> str:
    median, p99 = delay.get("median"), delay.get("p99")
    if median is None:
        return "-"
    return f"{median:.0f}" + (f" / {p99:.0f}" if p99 is not None else "")


def _order(result: RunResult) -> str:
    return "commit" if result.order == "commit" else f"W = {result.watermark:g} s"


def race_table(results: Sequence[RunResult]) -> str:
    """The runs side by side, one column each."""
    rows: list[tuple[str, list[str]]] = [
        ("feed order", [_order(result) for result in results]),
        ("duration (s)", [f"{result.duration:.1f}" for result in results]),
        ("tenders / writers", [f"{result.tenders} / {result.writers}" for result in results]),
        ("write delay (ms)", [result.write_delay_ms for result in results]),
        ("patches (errors)", [f"{result.patches} ({result.write_errors})" for result in results]),
        ("patches/s", [f"{result.patches_per_second:.1f}" for result in results]),
        ("feed checks", [str(result.checks) for result in results]),
        ("failures", [f"{result.failures} ({result.failure_percent:.2f} %)" for result in results]),
        ("late-arrival lag min/max/mean (ms)", [_lags(result) for result in results]),
        ("crawler items delivered", [str(result.crawler_items) for result in results]),
        ("crawler lost tenders", [str(result.lost) for result in results]),
        ("crawler duplicates", [str(result.duplicates) for result in results]),
        ("feed delay median/p99/max (ms)", [_delay(result) for result in results]),
        ("crawler delay median/p99 (ms), long-poll", [_median_p99(result.longpoll_delay_ms) for result in results]),
        (
            "long-poll crawler lost tenders",
            ["-" if result.longpoll_lost is None else str(result.longpoll_lost) for result in results],
        ),
        ("write conflicts (retried)", [str(result.write_conflicts) for result in results]),
        ("database CPU per patch (ms)", [_ms(result.database_cpu_ms_per_patch) for result in results]),
    ]
    if any(result.hot for result in results):
        rows.append(
            (
                "longest invisible while written (s)",
                [
                    "-" if result.longest_invisible_s is None else f"{result.longest_invisible_s:.2f}"
                    for result in results
                ],
            )
        )
    label_width = max(len(label) for label, _ in rows)
    widths = [max(len(values[column]) for _, values in rows) for column in range(len(results))]
    lines = []
    for label, values in rows:
        cells = "  ".join(value.rjust(width) for value, width in zip(values, widths, strict=False))
        lines.append(f"{label.ljust(label_width)}  {cells}".rstrip())
    return "\n".join(lines)


def race_json(results: Sequence[RunResult]) -> str:
    """The runs as a JSON list, one object per run."""
    return json.dumps([result.to_dict() for result in results], indent=2)


def _stamp(value: float) -> str:
    return f"{value:.3f}"


def _when(moment: float) -> str:
    return datetime.fromtimestamp(moment, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_anomaly(result: CheckResult) -> str:
    """A found anomaly: the window, the snapshot's edges and the late arrivals."""
    assert result.oldest is not None and result.newest is not None
    lines = [
        f"ANOMALY DETECTED {_when(result.at)}",
        f"  window: public_modified ({_stamp(result.oldest)} … {_stamp(result.newest)}]",
        f"  snapshot ({len(result.snapshot)} items, newest first):",
    ]
    snapshot = result.snapshot
    shown = list(snapshot[:SHOWN_SNAPSHOT_ITEMS])
    for number, item in enumerate(shown):
        mark = "  <- newest" if number == 0 else ""
        lines.append(f"    {_stamp(item.public_modified)} {item.id}{mark}")
    if len(snapshot) > SHOWN_SNAPSHOT_ITEMS:
        if len(snapshot) > SHOWN_SNAPSHOT_ITEMS + 1:
            lines.append(f"    … {len(snapshot) - SHOWN_SNAPSHOT_ITEMS - 1} more")
        lines.append(f"    {_stamp(snapshot[-1].public_modified)} {snapshot[-1].id}  <- oldest")
    lines.append("  late arrivals (committed behind the newest after the snapshot):")
    for item, lag in zip(result.late, result.lags_ms, strict=False):
        kind = "  (a newer version of a snapshot item)" if result.is_rewrite(item) else ""
        lines.append(f"    >>> {_stamp(item.public_modified)} {item.id}  {lag:g} ms older than the newest{kind}")
    return "\n".join(lines)


def check_summary(stats: DetectorStats, duration: float, empty: int = 0) -> str:
    """One line: checks, failures, lags (``empty``: snapshots that had no items)."""
    percent = 100.0 * stats.failures / stats.checks if stats.checks else 0.0
    text = f"{stats.checks} checks in {duration:.1f} s: {stats.failures} with late arrivals ({percent:.2f} %)"
    if stats.lags_ms:
        lags = stats.lags_ms
        text += f"; lags min {min(lags):g} ms, max {max(lags):g} ms, mean {sum(lags) / len(lags):.1f} ms"
    if empty:
        text += f"; {empty} empty snapshot{'s' if empty != 1 else ''} (nothing to check)"
    return text
