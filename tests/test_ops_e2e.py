"""The checks of the production-shaped test (ops/e2e.py, ``make test-ops``; the
package ops/production_test) that need no process: the crawler summary it
reads, the loss check and its deliberate drop, the page accounting, the
requirements and OPS_OPTIONAL, and the script's own command line.
The test itself runs under ``make test-ops``, not here (two minutes, a
Prometheus server)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from openprocurement_feed.client.sync import SyncStats
from openprocurement_feed.commands.sync import summary
from ops.production_test.clock import Clock
from ops.production_test.deployment import ALERT
from ops.production_test.figures import lost_versions, parse_sync_summary, percentile
from ops.production_test.main import main
from ops.production_test.prometheus import AlertWatch

E2E = Path(__file__).resolve().parent.parent / "ops" / "e2e.py"


def test_reads_the_sync_commands_summary() -> None:
    stats = SyncStats(
        items=158, duplicates=7, pages=104, forward_pages=103, backward_pages=1, polls=8, retries=1, elapsed=90.0
    )
    text = "some log line\n" + summary(stats, "state.json", "out.jsonl") + "\n"
    figures = parse_sync_summary(text)
    assert (figures.items, figures.pages, figures.polls, figures.retries, figures.restarts) == (158, 104, 8, 1, 0)
    assert figures.duplicates == 7
    # pages with items, empty polls and the uncounted empty end of history
    assert figures.requests_answered == 113
    assert parse_sync_summary("openprocurement-feed sync: cannot connect") is None


def test_the_loss_check_finds_a_missing_final_version() -> None:
    finals = {"a": "2026-01-01T00:00:02", "b": "2026-01-01T00:00:05"}
    received = {("a", "2026-01-01T00:00:01"), ("a", "2026-01-01T00:00:02"), ("b", "2026-01-01T00:00:04")}
    lost, dropped = lost_versions(finals, received)
    assert lost == ["b"] and dropped == []
    received.add(("b", "2026-01-01T00:00:05"))
    assert lost_versions(finals, received) == ([], [])
    # --drop-final: the check must fail when a final version is left out
    lost, dropped = lost_versions(finals, received, drop=1)
    assert lost == ["a"] and dropped == [("a", "2026-01-01T00:00:02")]


def test_percentile() -> None:
    assert percentile([], 0.5) is None
    values = [float(n) for n in range(1, 101)]
    assert percentile(values, 0.5) == 51.0
    assert percentile(values, 0.99) == 99.0
    assert percentile(values, 1.0) == 100.0


def test_alert_watch_records_transitions() -> None:
    clock = Clock(60)
    watch = AlertWatch("http://127.0.0.1:1", clock)
    at_risk = {"labels": {"alertname": ALERT, "feed": "tenders"}}
    watch.note([{**at_risk, "state": "pending"}, {"labels": {"alertname": "Other"}, "state": "pending"}])
    watch.note([{**at_risk, "state": "pending"}])
    watch.note([{**at_risk, "state": "firing"}])
    watch.note([])
    assert [event.state for event in watch.events] == ["pending", "firing", "inactive"]
    firing = watch.first("tenders", "firing")
    assert firing is not None and watch.first("tenders", "inactive", after=firing) is not None
    assert watch.state("tenders") == "inactive" and watch.others == {"Other (pending)"}


def test_missing_tools_fail_with_what_is_needed(monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("PROMETHEUS", raising=False)
    monkeypatch.delenv("PROMTOOL", raising=False)
    monkeypatch.delenv("OPS_OPTIONAL", raising=False)
    assert main([]) == 2
    error = capsys.readouterr().err
    assert "make test-ops needs prometheus" in error and "promtool" in error
    assert "apt-get install prometheus" in error
    monkeypatch.setenv("OPS_OPTIONAL", "1")
    assert main([]) == 0
    assert "test-ops: SKIPPED (OPS_OPTIONAL=1)" in capsys.readouterr().out


def test_bad_options_are_refused(capsys: Any) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["--workers", "1"])
    assert stopped.value.code == 2
    assert "--workers must be at least 2" in capsys.readouterr().err


def test_the_script_runs_from_anywhere(tmp_path: Path) -> None:
    """``python ops/e2e.py`` (make test-ops) finds its package from any
    working directory."""
    result = subprocess.run(
        [sys.executable, str(E2E), "--help"], cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: ops/e2e.py") and "--drop-final" in result.stdout
