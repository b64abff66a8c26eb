"""The checks of the production-shaped test (ops/e2e.py, ``make test-ops``)
that need no process: the crawler summary it reads, the loss check and its
deliberate drop, the page accounting, the requirements and OPS_OPTIONAL.
The test itself runs under ``make test-ops``, not here (two minutes, a
Prometheus server)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from openprocurement_feed.client.sync import SyncStats
from openprocurement_feed.commands.sync import summary

E2E = Path(__file__).resolve().parent.parent / "ops" / "e2e.py"


@pytest.fixture(scope="module")
def e2e() -> ModuleType:
    spec = importlib.util.spec_from_file_location("ops_e2e", E2E)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["ops_e2e"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_reads_the_sync_commands_summary(e2e: Any) -> None:
    stats = SyncStats(
        items=158, duplicates=7, pages=104, forward_pages=103, backward_pages=1, polls=8, retries=1, elapsed=90.0
    )
    text = "some log line\n" + summary(stats, "state.json", "out.jsonl") + "\n"
    figures = e2e.parse_sync_summary(text)
    assert (figures.items, figures.pages, figures.polls, figures.retries, figures.restarts) == (158, 104, 8, 1, 0)
    assert figures.duplicates == 7
    # pages with items, empty polls and the uncounted empty end of history
    assert figures.requests_answered == 113
    assert e2e.parse_sync_summary("openprocurement-feed sync: cannot connect") is None


def test_the_loss_check_finds_a_missing_final_version(e2e: Any) -> None:
    finals = {"a": "2026-01-01T00:00:02", "b": "2026-01-01T00:00:05"}
    received = {("a", "2026-01-01T00:00:01"), ("a", "2026-01-01T00:00:02"), ("b", "2026-01-01T00:00:04")}
    lost, dropped = e2e.lost_versions(finals, received)
    assert lost == ["b"] and dropped == []
    received.add(("b", "2026-01-01T00:00:05"))
    assert e2e.lost_versions(finals, received) == ([], [])
    # --drop-final: the check must fail when a final version is left out
    lost, dropped = e2e.lost_versions(finals, received, drop=1)
    assert lost == ["a"] and dropped == [("a", "2026-01-01T00:00:02")]


def test_percentile(e2e: Any) -> None:
    assert e2e.percentile([], 0.5) is None
    values = [float(n) for n in range(1, 101)]
    assert e2e.percentile(values, 0.5) == 51.0
    assert e2e.percentile(values, 0.99) == 99.0
    assert e2e.percentile(values, 1.0) == 100.0


def test_alert_watch_records_transitions(e2e: Any) -> None:
    clock = e2e.Clock(60)
    watch = e2e.AlertWatch("http://127.0.0.1:1", clock)
    at_risk = {"labels": {"alertname": e2e.ALERT, "feed": "tenders"}}
    watch.note([{**at_risk, "state": "pending"}, {"labels": {"alertname": "Other"}, "state": "pending"}])
    watch.note([{**at_risk, "state": "pending"}])
    watch.note([{**at_risk, "state": "firing"}])
    watch.note([])
    assert [event.state for event in watch.events] == ["pending", "firing", "inactive"]
    firing = watch.first("tenders", "firing")
    assert firing is not None and watch.first("tenders", "inactive", after=firing) is not None
    assert watch.state("tenders") == "inactive" and watch.others == {"Other (pending)"}


def test_missing_tools_fail_with_what_is_needed(e2e: Any, monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("PROMETHEUS", raising=False)
    monkeypatch.delenv("PROMTOOL", raising=False)
    monkeypatch.delenv("OPS_OPTIONAL", raising=False)
    assert e2e.main([]) == 2
    error = capsys.readouterr().err
    assert "make test-ops needs prometheus" in error and "promtool" in error
    assert "apt-get install prometheus" in error
    monkeypatch.setenv("OPS_OPTIONAL", "1")
    assert e2e.main([]) == 0
    assert "test-ops: SKIPPED (OPS_OPTIONAL=1)" in capsys.readouterr().out


def test_bad_options_are_refused(e2e: Any, capsys: Any) -> None:
    with pytest.raises(SystemExit) as stopped:
        e2e.main(["--workers", "1"])
    assert stopped.value.code == 2
    assert "--workers must be at least 2" in capsys.readouterr().err
