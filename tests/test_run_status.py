"""``run``'s periodic status: rows from the health report and the writers,
a table redrawn in place on a terminal, one line per feed otherwise."""

from __future__ import annotations

import io
import re
from collections import Counter
from types import SimpleNamespace
from typing import Any

import pytest

from openprocurement_feed.commands.run_status import FeedRow, StatusBoard, StatusOutput

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def report() -> dict[str, Any]:
    """A health report of two feeds, as :func:`health_report` makes it."""

    def feed(name: str, verdict: str, p50: float, p99: float, checkpoint: float | None) -> dict[str, Any]:
        return {
            "name": name,
            "verdict": verdict,
            "order": "commit",
            "reason": "",
            "watcher": {"running": True, "age_seconds": 0.5},
            "checkpoint": {"age_seconds": checkpoint},
            "lag_ms": {"p50": p50, "p99": p99, "max": p99, "count": 10, "window_seconds": 300},
        }

    return {"status": "ok", "feeds": [feed("tenders", "ok", 3.2, 41.0, 0.4), feed("plans", "at-risk", 12, 950, None)]}


def writer(**counts: int) -> Any:
    return SimpleNamespace(by_resource=Counter(counts), stats=SimpleNamespace(patches=sum(counts.values())))


def test_rows_take_the_verdicts_lags_and_each_feeds_patch_rate() -> None:
    board = StatusBoard({"tenders": "tenders", "plans": "plans"})
    writers = [writer(tenders=0, plans=0)]
    board.rows(report(), {"tenders": "tenders", "plans": "plans"}, writers)
    writers[0].by_resource.update(tenders=30, plans=10)
    board.last_time -= 10.0  # ten seconds since the last rows
    rows = board.rows(report(), {"tenders": "tenders", "plans": "plans"}, writers)
    tenders, plans = rows
    assert (tenders.name, tenders.verdict, tenders.p50, tenders.p99) == ("tenders", "ok", 3.2, 41.0)
    assert tenders.patches_per_second == pytest.approx(3.0, rel=0.01)
    assert plans.patches_per_second == pytest.approx(1.0, rel=0.01)
    assert plans.verdict == "at-risk"


def test_without_writers_the_rate_is_a_dash() -> None:
    rows = StatusBoard({}).rows(report(), {}, [])
    assert rows[0].patches_per_second is None
    assert rows[0].line(5).endswith("; – patches/s")


def test_not_a_terminal_one_plain_line_per_feed_per_interval() -> None:
    stream = io.StringIO()
    output = StatusOutput(stream, terminal=False)
    rows = [FeedRow("tenders", "ok", 3.2, 41.0, 0.4, 2.5), FeedRow("plans", "at-risk", 12.0, 950.0, None, 0.5)]
    output.show(30.0, rows, "title")
    output.show(60.0, rows, "title")
    output.close()
    lines = stream.getvalue().splitlines()
    assert lines == [
        "[    30 s] tenders: ok; lag p50 3.2 ms, p99 41 ms; checkpoint 0.4 s; 2.5 patches/s",
        "[    30 s] plans: at-risk; lag p50 12 ms, p99 950 ms; checkpoint –; 0.5 patches/s",
        "[    60 s] tenders: ok; lag p50 3.2 ms, p99 41 ms; checkpoint 0.4 s; 2.5 patches/s",
        "[    60 s] plans: at-risk; lag p50 12 ms, p99 950 ms; checkpoint –; 0.5 patches/s",
    ]
    assert "\x1b" not in stream.getvalue()


def test_on_a_terminal_the_table_is_redrawn_in_place(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    monkeypatch.setenv("TERM", "xterm-256color")
    stream = io.StringIO()
    output = StatusOutput(stream, terminal=True)
    output.show(30.0, [FeedRow("tenders", "ok", 3.2, 41.0, 0.4, 2.5)], "120 patches written")
    first = len(stream.getvalue())
    output.show(60.0, [FeedRow("tenders", "violated", 3.2, 1200.0, 0.4, 2.5)], "240 patches written")
    output.close()
    raw = stream.getvalue()
    # the second table goes over the first: the cursor goes up, lines are erased
    assert "\x1b[1A" in raw[first:] and "\x1b[2K" in raw[first:]
    text = ANSI.sub("", raw)
    for header in ("feed", "verdict", "lag p50 (ms)", "p99 (ms)", "checkpoint", "patches/s"):
        assert header in text
    assert "[60 s] 240 patches written" in text and "violated" in text and "1200" in text
