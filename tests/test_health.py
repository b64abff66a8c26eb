"""The health view against the real server: the lag the watermark bets on,
measured live, and the verdict it gives; a stalled sequencer in commit order."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from webtest import TestApp

from openprocurement_feed import shutdown
from openprocurement_feed.demo import main
from openprocurement_feed.store.state import feed_state

FEED = "/api/2.5/tenders"
HEALTH = "/api/2.5/feeds/health"


def app_with(settings: dict[str, str], **extra: str) -> TestApp:
    values = dict(settings, **{"feed.watermark_seconds": "1"})
    values.update({key.replace("_", ".", 1): value for key, value in extra.items()})
    return TestApp(main({}, **values))


def write_concurrently(web: TestApp, count: int) -> None:
    """``count`` tender creations at once (each held open by the write delay)."""
    threads = [threading.Thread(target=web.post_json, args=(FEED, {"data": {"title": str(n)}})) for n in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def wait_watching(web: TestApp, timeout: float = 30.0) -> None:
    """Wait until the observer's stream is open: it publishes its first
    window after its first read, and the health view says it runs."""
    deadline = time.monotonic() + timeout
    while not web.get(HEALTH, status="*").json["feeds"][0]["watcher"]["running"]:
        assert time.monotonic() < deadline, f"the observer did not start within {timeout} s"
        time.sleep(0.05)


def health_after(web: TestApp, samples: int, status: int | None = None, timeout: float = 30.0) -> Any:
    """The health body once the watcher published ``samples`` lags."""
    deadline = time.monotonic() + timeout
    while True:
        response = web.get(HEALTH, status="*")
        feed = response.json["feeds"][0]
        if feed["lag_ms"]["count"] >= samples or time.monotonic() > deadline:
            if status is not None:
                assert response.status_int == status
            return response
        time.sleep(0.2)


@pytest.mark.parametrize(
    "watermark, delay, verdict, status",
    [
        # writes held 3.1-3.5 s under a W of 6 s: past W/2 by their delay,
        # and a loaded machine's extra commit time (measured: 650 ms) stays
        # below W with 2.5 s to spare
        ("6", "3100-3500", "at-risk", 200),
        ("1", "1200-1500", "violated", 503),
        # 5-40 ms writes: a loaded machine's slack (measured: a plain write
        # took 611 ms) stays far below W/2
        ("10", "5-40", "ok", 200),
    ],
)
def test_the_verdict_follows_the_measured_lag(
    settings: dict[str, str], watermark: str, delay: str, verdict: str, status: int
) -> None:
    web = app_with(settings, feed_sequencer="observe", demo_write_delay_ms=delay, feed_watermark_seconds=watermark)
    try:
        wait_watching(web)
        write_concurrently(web, 4)
        response = health_after(web, 4, status)
        body = response.json
        feed = body["feeds"][0]
        assert body["status"] == verdict == feed["verdict"], feed["reason"]
        assert feed["order"] == "watermark" and feed["watermark_seconds"] == float(watermark)
        assert feed["watcher"]["running"] is True
        lag = feed["lag_ms"]
        assert lag["count"] >= 4 and lag["window_seconds"] == 300.0
        # the lag measured holds the write's delay (a busy machine only adds)
        low = int(delay.split("-")[0]) - 50
        assert low <= lag["p50"] <= lag["max"], lag
    finally:
        shutdown(web.app.registry)


def test_without_a_watcher_the_verdict_is_unknown(settings: dict[str, str]) -> None:
    web = app_with(settings)
    try:
        body = web.get(HEALTH).json
        assert body["status"] == "unknown"
        assert body["feeds"][0]["watcher"]["running"] is False
        assert "openprocurement-feed sequence --observe" in body["hint"]
    finally:
        shutdown(web.app.registry)


def test_a_stopped_sequencer_turns_the_commit_feed_at_risk_and_back(settings: dict[str, str]) -> None:
    from openprocurement_feed.commit.sequencer import Sequencer

    web = app_with(settings, feed_order="commit", feed_sequencer="thread", feed_checkpoint_threshold_seconds="2")
    registry = web.app.registry
    try:
        assert registry.feed_sequencer.wait_ready(timeout=30)
        web.post_json(FEED, {"data": {"title": "first"}})
        deadline = time.monotonic() + 10
        while web.get(HEALTH, status="*").json["feeds"][0]["verdict"] != "ok":
            assert time.monotonic() < deadline, "the sequencer did not publish a checkpoint within 10 s"
            time.sleep(0.05)
        registry.feed_sequencer.stop()  # its threads joined: nothing covers a write now
        web.post_json(FEED, {"data": {"title": "while stopped"}})
        # At-risk once the write has waited the threshold (2 s): every health
        # request begun after that, and 1 s of slack, must say so. Judged by
        # when a request began (the verdict is computed from the data by the
        # database's clock as it runs), not when a loaded machine's loop saw it.
        due = time.time() + 2 + 1
        while True:
            began = time.time()
            feed = web.get(HEALTH).json["feeds"][0]
            if feed["verdict"] != "ok":
                break
            assert began < due, f"still ok in a request begun {began - due + 3:.1f} s after the write: {feed}"
            time.sleep(0.1)
        assert feed["verdict"] == "at-risk", feed
        assert "is the sequencer running" in feed["reason"]
        feed_state(registry).sequencer = Sequencer(registry.feed_store.db, {"tenders": ()}).start()
        deadline = time.monotonic() + 10
        while web.get(HEALTH).json["feeds"][0]["verdict"] != "ok" and time.monotonic() < deadline:
            time.sleep(0.2)
        assert web.get(HEALTH).json["feeds"][0]["verdict"] == "ok"
    finally:
        shutdown(registry)


def test_transitions_are_logged_once(settings: dict[str, str], caplog: pytest.LogCaptureFixture) -> None:
    web = app_with(settings, feed_sequencer="observe", demo_write_delay_ms="1200-1300")
    try:
        wait_watching(web)
        write_concurrently(web, 2)
        health_after(web, 2)
        with caplog.at_level("INFO", logger="openprocurement_feed.health"):
            for _ in range(3):
                web.get(HEALTH, status=503)
        errors = [record for record in caplog.records if record.levelname == "ERROR"]
        assert len(errors) == 1 and "violated" in errors[0].getMessage()
    finally:
        shutdown(web.app.registry)


def test_the_metrics_report_the_lag_window_and_the_checkpoint_age(settings: dict[str, str]) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    web = app_with(settings, feed_order="commit", feed_sequencer="thread", feed_metrics_path="/metrics")
    try:
        assert web.app.registry.feed_sequencer.wait_ready(timeout=30)
        web.post_json(FEED, {"data": {"title": "measured"}})
        health_after(web, 1)
        samples = {
            (sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(web.get("/metrics").text)
            for sample in family.samples
        }
        assert ("openprocurement_feed_checkpoint_age_seconds", (("collection", "tenders"),)) in samples
        assert any(name == "openprocurement_feed_lag_window_seconds" for name, _ in samples)
        lag_count = samples[("openprocurement_feed_commit_lag_seconds_count", (("collection", "tenders"),))]
        assert lag_count >= 1, "the in-process sequencer observed the write's lag"
    finally:
        shutdown(web.app.registry)


def test_monitor_check_reads_the_real_health_view(settings: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    """``monitor --check`` against the app's own health view over HTTP:
    unknown without a watcher (1), at-risk under slow commits (1), ok (0)."""
    from openprocurement_feed.cli import main as cli_main
    from openprocurement_feed.demo.server import DemoServer

    values = dict(settings, **{"feed.watermark_seconds": "1"})
    with DemoServer(values) as server:
        assert cli_main(["monitor", server.api_url, "--check"]) == 1
        assert capsys.readouterr().out.startswith("unknown: tenders unknown")
    # writes held past W/2, a loaded machine's extra time below W
    values.update({"feed.sequencer": "observe", "demo.write_delay_ms": "2100-2500", "feed.watermark_seconds": "4"})
    with DemoServer(values) as server:
        web = TestApp(server.app)
        wait_watching(web)
        write_concurrently(web, 3)
        health_after(web, 3)
        assert cli_main(["monitor", server.api_url, "--check"]) == 1
        assert capsys.readouterr().out.startswith("at-risk: tenders at-risk")
    # a new observer (a window of its own), and a W whose half no write of
    # a busy machine's takes
    values.update({"demo.write_delay_ms": "0", "feed.watermark_seconds": "10"})
    with DemoServer(values) as server:
        web = TestApp(server.app)
        wait_watching(web)
        write_concurrently(web, 3)
        health_after(web, 3)
        assert cli_main(["monitor", server.api_url, "--check"]) == 0
        assert capsys.readouterr().out.startswith("ok: tenders ok")


def test_the_health_verdict_line() -> None:
    from openprocurement_feed.operations.health import verdict_line

    report = {
        "feeds": [
            {"name": "tenders", "verdict": "ok", "lag_ms": {"count": 3, "p50": 4.2, "p99": 9.7, "max": 12.0}},
            {"name": "plans", "verdict": "unknown", "lag_ms": {"count": 0}},
        ]
    }
    assert verdict_line(report) == "tenders ok (lag p50 4 / p99 10 / max 12 ms), plans unknown"
    assert verdict_line({}) == ""
