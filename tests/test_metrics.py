"""Prometheus metrics: the metrics path, what the feed tween counts, the
values other parts feed in, the permission, the off switch, a missing
prometheus_client and the multi-process mode."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyramid.config import Configurator
from webtest import TestApp

ROOT = Path(__file__).resolve().parent.parent
METRICS_PATH = "/api/2.5/metrics"
TWEEN = "openprocurement_feed.operations.metrics.metrics_tween_factory"


@pytest.fixture(autouse=True)
def _no_metrics_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """A developer's metrics environment must not change these tests."""
    for name in ("FEED_METRICS_PATH", "FEED_METRICS_PERMISSION", "PROMETHEUS_MULTIPROC_DIR"):
        monkeypatch.delenv(name, raising=False)


def make_app(settings: dict[str, str], configure: Any = None) -> Any:
    """An app with the ``tenders`` feed, a scoped feed and a plain route."""
    config = Configurator(settings=settings)
    if configure is not None:
        configure(config)
    config.include("openprocurement_feed")
    config.add_feed("tenders")
    config.add_feed("plans")

    def echo(request: Any) -> dict[str, str]:
        return {"echo": "yes"}

    config.add_route("echo", "/echo")
    config.add_view(echo, route_name="echo", renderer="json")
    return config.make_wsgi_app()


@pytest.fixture
def metrics_settings(settings: dict[str, str]) -> dict[str, str]:
    return dict(settings, **{"feed.metrics_path": "{route_prefix}/metrics"})


@pytest.fixture
def app(metrics_settings: dict[str, str]) -> Iterator[Any]:
    app = make_app(metrics_settings)
    store = app.registry.feed_store
    for number in range(3):
        store.save_data(
            store.collection("tenders"),
            {"_id": f"t{number}", "public_modified": 5.0 + number, "dateModified": "2020"},
            insert=True,
            modified=False,
        )
    yield app
    store.close()


def scrape(web: TestApp, **kwargs: Any) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of the metrics path: ``(sample name, labels) → value``."""
    from prometheus_client.parser import text_string_to_metric_families

    response = web.get(METRICS_PATH, **kwargs)
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def value(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def test_the_metrics_path_serves_the_named_metrics(app: Any) -> None:
    from prometheus_client import CONTENT_TYPE_LATEST
    from prometheus_client.parser import text_string_to_metric_families

    web = TestApp(app)
    web.get("/api/2.5/tenders")
    app.registry.feed_metrics.observe_lag("tenders", 0.01)
    app.registry.feed_metrics.set_checkpoint_age("tenders", 1.5)
    response = web.get(METRICS_PATH)
    assert response.headers["Content-Type"] == CONTENT_TYPE_LATEST
    types = {
        family.name: family.type
        for family in text_string_to_metric_families(response.text)
        if not family.name.endswith("_created")  # the classic text format's creation times
    }
    assert types == {
        "openprocurement_feed_pages": "counter",
        "openprocurement_feed_items": "counter",
        "openprocurement_feed_page_seconds": "histogram",
        "openprocurement_feed_commit_lag_seconds": "histogram",
        "openprocurement_feed_checkpoint_age_seconds": "gauge",
        "openprocurement_feed_longpoll_waiters": "gauge",
        "openprocurement_feed_longpoll_wakeups": "counter",
        "openprocurement_feed_longpoll_timeouts": "counter",
        "openprocurement_feed_longpoll_over_cap": "counter",
        "openprocurement_feed_verdict": "gauge",
        "openprocurement_feed_metrics_errors": "counter",
        "openprocurement_feed_reconcile_sessions": "counter",
        "openprocurement_feed_reconcile_rounds": "counter",
        "openprocurement_feed_reconcile_bytes": "counter",
        "openprocurement_feed_reconcile_differences": "counter",
    }
    assert "openprocurement_feed_pages_total{" in response.text


def test_pages_are_counted_by_final_status_with_items_and_latency(app: Any) -> None:
    web = TestApp(app)
    first = web.get("/api/2.5/tenders?limit=2").json
    assert len(first["data"]) == 2
    assert len(web.get(first["next_page"]["path"]).json["data"]) == 1
    web.get("/api/2.5/plans")
    web.get("/api/2.5/tenders?limit=nope", status=400)
    web.get("/api/2.5/tenders?limit=1.5", status=400)
    web.get("/api/2.5/tenders?offset=not-an-offset", status=404)
    samples = scrape(web)
    pages = "openprocurement_feed_pages_total"
    assert value(samples, pages, feed="tenders", status="200") == 2
    assert value(samples, pages, feed="tenders", status="400") == 2
    assert value(samples, pages, feed="tenders", status="404") == 1
    assert value(samples, pages, feed="plans", status="200") == 1
    assert value(samples, "openprocurement_feed_items_total", feed="tenders") == 3
    assert value(samples, "openprocurement_feed_items_total", feed="plans") == 0
    latency = "openprocurement_feed_page_seconds"
    assert value(samples, latency + "_count", feed="tenders") == 5
    assert value(samples, latency + "_bucket", feed="tenders", le="+Inf") == 5
    assert value(samples, latency + "_count", feed="plans") == 1
    assert 0 < value(samples, latency + "_sum", feed="tenders") < 60  # type: ignore[operator]
    assert value(samples, latency + "_bucket", feed="tenders", le="0.001") is not None
    assert value(samples, latency + "_bucket", feed="tenders", le="5.0") is not None


def test_other_requests_and_scrapes_are_not_counted(app: Any) -> None:
    web = TestApp(app)
    web.get("/echo")
    web.get("/nowhere", status=404)
    scrape(web)
    samples = scrape(web)
    assert not [key for key in samples if key[0].startswith("openprocurement_feed_pages")]


def test_exception_views_statuses_are_counted(app: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A 503 rendered by an exception view counts as 503; an exception no view
    handles counts as 500 and goes on up."""
    from pymongo.errors import ConnectionFailure

    store = app.registry.feed_store
    web = TestApp(app)

    def unreachable(*args: Any, **kwargs: Any) -> Any:
        raise ConnectionFailure("down")

    monkeypatch.setattr(store, "feed_page", unreachable)  # this app's store only
    web.get("/api/2.5/tenders", status=503)

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("bug")

    monkeypatch.setattr(store, "feed_page", broken)
    with pytest.raises(RuntimeError):
        web.get("/api/2.5/tenders")
    monkeypatch.undo()
    samples = scrape(web)
    pages = "openprocurement_feed_pages_total"
    assert value(samples, pages, feed="tenders", status="503") == 1
    assert value(samples, pages, feed="tenders", status="500") == 1
    assert value(samples, "openprocurement_feed_page_seconds_count", feed="tenders") == 2
    assert value(samples, "openprocurement_feed_items_total", feed="tenders") == 0


def test_lag_checkpoint_age_and_scrape_hooks(app: Any) -> None:
    metrics = app.registry.feed_metrics
    web = TestApp(app)
    for seconds in (0.0005, 0.02, 0.3, -0.001):
        metrics.observe_lag("tenders", seconds)
    metrics.set_checkpoint_age("tenders", 2.5)
    metrics.set_checkpoint_age("plans", 9.0)
    samples = scrape(web)
    lag = "openprocurement_feed_commit_lag_seconds"
    assert value(samples, lag + "_count", collection="tenders") == 4
    assert value(samples, lag + "_sum", collection="tenders") == pytest.approx(0.3205)
    assert value(samples, lag + "_bucket", collection="tenders", le="0.001") == 2  # -1 ms is 0
    assert value(samples, lag + "_bucket", collection="tenders", le="10.0") == 4
    age = "openprocurement_feed_checkpoint_age_seconds"
    assert value(samples, age, collection="tenders") == 2.5
    assert value(samples, age, collection="plans") == 9.0

    calls: list[int] = []

    def ages() -> dict[str, float | None]:
        calls.append(1)
        return {"plans": 0.75, "contracts": 4.0, "unknown": None}

    def failing() -> dict[str, float]:
        raise RuntimeError("database down")

    metrics.add_scrape_hook(ages)
    metrics.add_scrape_hook(failing)
    metrics.add_lag_window_hook(lambda: {"tenders": {"p50": 0.01, "p99": 0.2, "max": 0.4, "odd": 1.0}})
    samples = scrape(web)
    assert value(samples, age, collection="tenders") == 2.5
    assert value(samples, age, collection="plans") == 0.75  # computed at scrape time
    assert value(samples, age, collection="contracts") == 4.0
    assert value(samples, age, collection="unknown") is None
    window = "openprocurement_feed_lag_window_seconds"
    assert value(samples, window, collection="tenders", quantile="0.5") == 0.01
    assert value(samples, window, collection="tenders", quantile="0.99") == 0.2
    assert value(samples, window, collection="tenders", quantile="1") == 0.4
    assert len([key for key in samples if key[0] == window]) == 3
    scrape(web)
    assert len(calls) == 2


def test_the_metrics_path_honours_its_permission(metrics_settings: dict[str, str]) -> None:
    from pyramid.security import Allowed, Denied

    class HeaderPolicy:
        """Grants ``metrics.read`` to requests that carry ``X-Role: monitor``."""

        def identity(self, request: Any) -> str | None:
            return request.headers.get("X-Role")

        def authenticated_userid(self, request: Any) -> str | None:
            return self.identity(request)

        def permits(self, request: Any, context: Any, permission: str) -> Any:
            if permission == "metrics.read" and self.identity(request) == "monitor":
                return Allowed("monitor")
            return Denied("not a monitor")

        def remember(self, request: Any, userid: str, **kw: Any) -> list[Any]:
            return []

        def forget(self, request: Any, **kw: Any) -> list[Any]:
            return []

    app = make_app(
        dict(metrics_settings, **{"feed.metrics_permission": "metrics.read"}),
        lambda config: config.set_security_policy(HeaderPolicy()),
    )
    try:
        web = TestApp(app)
        web.get("/api/2.5/tenders")  # the feed itself stays public
        web.get(METRICS_PATH, status=403)
        web.get(METRICS_PATH, headers={"X-Role": "someone"}, status=403)
        samples = scrape(web, headers={"X-Role": "monitor"})
        assert value(samples, "openprocurement_feed_pages_total", feed="tenders", status="200") == 1
    finally:
        app.registry.feed_store.close()


def test_an_empty_path_registers_nothing(settings: dict[str, str]) -> None:
    from pyramid.interfaces import IRoutesMapper, ITweens

    app = make_app(settings)
    try:
        assert app.registry.feed_metrics is None
        TestApp(app).get(METRICS_PATH, status=404)
        tweens = app.registry.queryUtility(ITweens)
        assert TWEEN not in [name for name, _ in tweens.implicit()]
        routes = [route.name for route in app.registry.getUtility(IRoutesMapper).get_routes()]
        assert "openprocurement_feed.metrics" not in routes
    finally:
        app.registry.feed_store.close()


def test_a_custom_path_and_two_apps_in_one_process(metrics_settings: dict[str, str]) -> None:
    """Each app owns its metrics: two apps count apart."""
    one = make_app(dict(metrics_settings, **{"feed.metrics_path": "/ops/metrics"}))
    two = make_app(dict(metrics_settings, **{"feed.metrics_path": "/ops/metrics"}))
    try:
        assert one.registry.feed_metrics is not two.registry.feed_metrics
        TestApp(one).get("/api/2.5/tenders")
        TestApp(one).get("/api/2.5/tenders")
        TestApp(two).get("/api/2.5/tenders")
        text = TestApp(one).get("/ops/metrics").text
        assert 'openprocurement_feed_pages_total{feed="tenders",status="200"} 2.0' in text
        text = TestApp(two).get("/ops/metrics").text
        assert 'openprocurement_feed_pages_total{feed="tenders",status="200"} 1.0' in text
    finally:
        one.registry.feed_store.close()
        two.registry.feed_store.close()


def run_python(code: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter of this environment."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )


def test_a_missing_prometheus_client_stops_start_up(mongodb_uri: str) -> None:
    result = run_python(f"""
        import sys
        sys.modules["prometheus_client"] = None  # import prometheus_client fails
        from pyramid.config import Configurator
        from pyramid.exceptions import ConfigurationError
        config = Configurator(settings={{
            "mongodb.uri": {mongodb_uri!r}, "feed.metrics_path": "/metrics",
        }})
        try:
            config.include("openprocurement_feed")
        except ConfigurationError as error:
            print("ConfigurationError:", error)
            from openprocurement_feed.store.state import feed_state
            print("store:", feed_state(config.registry).store)
        else:
            print("started")
    """)
    assert result.returncode == 0, result.stderr
    assert "ConfigurationError:" in result.stdout
    assert "'feed.metrics_path'" in result.stdout
    assert "pip install 'openprocurement_feed[metrics]'" in result.stdout
    assert "store: None" in result.stdout  # nothing was started


#: One worker process of the multi-process test: serves pages, optionally
def test_the_health_hooks_report_verdicts_watcher_age_and_checkpoint_distance(app: Any) -> None:
    from openprocurement_feed.operations.figures import FeedFigures

    metrics = app.registry.feed_metrics
    web = TestApp(app)
    samples = scrape(web)
    verdict = "openprocurement_feed_verdict"
    for feed in ("tenders", "plans"):  # no watcher: unknown
        assert value(samples, verdict, feed=feed, verdict="unknown") == 1
        for other in ("ok", "at-risk", "violated"):
            assert value(samples, verdict, feed=feed, verdict=other) == 0
    assert not [key for key in samples if key[0].startswith("openprocurement_feed_watcher_age")]
    assert not [key for key in samples if key[0].startswith("openprocurement_feed_checkpoint_behind")]

    def failing() -> list[FeedFigures]:
        raise RuntimeError("database down")

    metrics.add_health_hook(failing)
    metrics.add_health_hook(
        lambda: [
            FeedFigures("contracts", "contracts", "at-risk", watcher_age=42.0, checkpoint_behind=7.5),
            FeedFigures("contracts_public", "contracts", "ok", watcher_age=1.0, checkpoint_behind=0.0),
        ]
    )
    samples = scrape(web)
    assert value(samples, verdict, feed="tenders", verdict="unknown") == 1, "a failing hook is skipped"
    assert value(samples, verdict, feed="contracts", verdict="at-risk") == 1
    assert value(samples, verdict, feed="contracts_public", verdict="ok") == 1
    # per collection: the first feed of a collection gives its figures
    assert value(samples, "openprocurement_feed_watcher_age_seconds", collection="contracts") == 42.0
    assert value(samples, "openprocurement_feed_checkpoint_behind_seconds", collection="contracts") == 7.5


def test_the_health_figures_of_a_running_sequencer(metrics_settings: dict[str, str]) -> None:
    from openprocurement_feed import shutdown
    from openprocurement_feed.demo import main

    web = TestApp(main({}, **dict(metrics_settings, **{"feed.order": "commit", "feed.sequencer": "thread"})))
    registry = web.app.registry
    try:
        assert registry.feed_sequencer.wait_ready(timeout=30)
        created = web.post_json("/api/2.5/tenders", {"data": {"title": "one"}}).json["data"]
        from openprocurement_feed.operations.health import STALE_AFTER

        # its figures published and the write covered by its checkpoint: events, waited for. A
        # write younger than 0.05 s rounds to 0 uncovered seconds, so coverage is the feed's page.
        deadline = time.monotonic() + 30
        while True:
            shown = [item["id"] for item in web.get("/api/2.5/tenders").json["data"]]
            feed = web.get("/api/2.5/feeds/health").json["feeds"][0]
            covered = created["id"] in shown and (feed["checkpoint"] or {}).get("uncovered_seconds") == 0
            if feed["watcher"]["age_seconds"] is not None and covered:
                break
            assert time.monotonic() < deadline, f"the sequencer did not publish its figures and cover the write: {feed}"
            time.sleep(0.2)
        samples = scrape(web)
        assert value(samples, "openprocurement_feed_verdict", feed="tenders", verdict="ok") == 1
        age = value(samples, "openprocurement_feed_watcher_age_seconds", collection="tenders")
        assert age is not None and 0 <= age <= STALE_AFTER, "fresh, as the ok verdict says"
        behind = value(samples, "openprocurement_feed_checkpoint_behind_seconds", collection="tenders")
        assert behind == 0, "nothing written since the write it covered"
    finally:
        shutdown(registry)


def test_a_value_prometheus_client_cannot_record_fails_neither_a_request_nor_the_sequencer(
    metrics_settings: dict[str, str], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """prometheus_client left in multi-process mode without its folder (a
    process that lost ``PROMETHEUS_MULTIPROC_DIR`` after the import) raises
    ``TypeError`` on every new value: the pages are answered, the sequencer
    sequences, and the errors are logged and counted."""
    from prometheus_client import values

    from openprocurement_feed import shutdown
    from openprocurement_feed.demo import main

    web = TestApp(main({}, **dict(metrics_settings, **{"feed.order": "commit", "feed.sequencer": "thread"})))
    registry = web.app.registry
    try:
        assert registry.feed_sequencer.wait_ready(timeout=30)
        monkeypatch.setattr(values, "ValueClass", values.MultiProcessValue())
        created = web.post_json("/api/2.5/tenders", {"data": {"title": "one"}}).json["data"]
        deadline = time.monotonic() + 30
        while True:  # the sequencer's lag value failed; it follows on
            page = web.get("/api/2.5/tenders").json["data"]
            if [item["id"] for item in page] == [created["id"]]:
                break
            assert time.monotonic() < deadline, "the sequencer stopped on a metrics value"
            time.sleep(0.1)
        assert registry.feed_sequencer.wait_ready(timeout=1)
        metrics = registry.feed_metrics
        assert metrics.errors >= 2, "the pages' values and the lag's were counted"
        assert value(scrape(web), "openprocurement_feed_metrics_errors_total") == metrics.errors
        logged = " ".join(record.getMessage() for record in caplog.records)
        assert "Metrics: observe_page failed" in logged and "Metrics: observe_lag failed" in logged, logged
    finally:
        shutdown(registry)


def test_prometheus_client_left_in_multi_process_mode_stops_start_up(
    metrics_settings: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from prometheus_client import values
    from pyramid.exceptions import ConfigurationError

    monkeypatch.setattr(values, "ValueClass", values.MultiProcessValue())
    with pytest.raises(ConfigurationError, match="PROMETHEUS_MULTIPROC_DIR was set, and it is no longer set"):
        make_app(metrics_settings)


#: records lag and checkpoint age, then optionally prints a scrape.
WORKER = """
    import json, os, sys
    from pyramid.config import Configurator
    from webtest import TestApp

    job = json.loads(sys.argv[1])
    config = Configurator(settings=job["settings"])
    config.include("openprocurement_feed")
    config.add_feed("tenders")
    app = config.make_wsgi_app()
    store = app.registry.feed_store
    for number in range(job["seed"]):
        store.save_data(
            store.collection("tenders"),
            {"_id": f"t{number}", "public_modified": 5.0 + number, "dateModified": "2020"},
            insert=True, modified=False,
        )
    web = TestApp(app)
    metrics = app.registry.feed_metrics
    assert metrics.multiprocess, "not in multi-process mode"
    for _ in range(job["pages"]):
        web.get("/api/2.5/tenders")
    for _ in range(job["bad"]):
        web.get("/api/2.5/tenders?limit=nope", status=400)
    for seconds in job["lags"]:
        metrics.observe_lag("tenders", seconds)
    if job["age"] is not None:
        metrics.set_checkpoint_age("tenders", job["age"])
    if job["hook"]:
        metrics.add_scrape_hook(lambda: {"plans": 3.0})
    if job["scrape"]:
        sys.stdout.write(web.get("/api/2.5/metrics").text)
    app.registry.feed_store.close()
"""


def test_multi_process_mode_aggregates_the_workers(metrics_settings: dict[str, str], tmp_path: Path) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    shared = tmp_path / "prometheus"
    shared.mkdir()
    env = dict(os.environ, PROMETHEUS_MULTIPROC_DIR=str(shared))
    script = tmp_path / "worker.py"
    script.write_text(textwrap.dedent(WORKER))
    jobs = [
        {"seed": 4, "pages": 3, "bad": 1, "lags": [0.01, 0.02], "age": 7.0, "hook": False, "scrape": False},
        {"seed": 0, "pages": 2, "bad": 0, "lags": [0.5], "age": None, "hook": True, "scrape": True},
    ]
    outputs = []
    for job in jobs:
        job["settings"] = metrics_settings
        result = subprocess.run(
            [sys.executable, str(script), json.dumps(job)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        outputs.append(result.stdout)
    assert len(list(shared.glob("*.db"))) >= 2  # each process wrote its own files
    samples = {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(outputs[1])
        for sample in family.samples
    }
    pages = "openprocurement_feed_pages_total"
    assert value(samples, pages, feed="tenders", status="200") == 5
    assert value(samples, pages, feed="tenders", status="400") == 1
    assert value(samples, "openprocurement_feed_items_total", feed="tenders") == 5 * 4
    assert value(samples, "openprocurement_feed_page_seconds_count", feed="tenders") == 6
    lag = "openprocurement_feed_commit_lag_seconds"
    assert value(samples, lag + "_count", collection="tenders") == 3
    assert value(samples, lag + "_sum", collection="tenders") == pytest.approx(0.53)
    age = "openprocurement_feed_checkpoint_age_seconds"
    assert value(samples, age, collection="tenders") == 7.0  # set by the other process
    assert value(samples, age, collection="plans") == 3.0  # this process's scrape hook
    assert outputs[1].count("# TYPE openprocurement_feed_checkpoint_age_seconds") == 1


def test_multi_process_mode_needs_the_variable_before_the_import(
    metrics_settings: dict[str, str], tmp_path: Path
) -> None:
    """Set after prometheus_client was imported, the variable would silently
    leave the values in memory: start-up says so instead."""
    result = run_python(f"""
        import os
        import prometheus_client
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = {str(tmp_path)!r}
        from pyramid.config import Configurator
        from pyramid.exceptions import ConfigurationError
        try:
            Configurator(settings={metrics_settings!r}).include("openprocurement_feed")
        except ConfigurationError as error:
            print("ConfigurationError:", error)
    """)
    assert result.returncode == 0, result.stderr
    assert "ConfigurationError: PROMETHEUS_MULTIPROC_DIR" in result.stdout
