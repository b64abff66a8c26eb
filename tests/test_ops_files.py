"""The operations files in the repository: the Prometheus alert rules and
their unit tests, the Grafana dashboard, the production examples.

The rules and the dashboard must name only metrics the application really
exports: the names are checked against a scrape of the demo app's metrics
path (commit order, an in-process sequencer, after a write and a page, so
that the scrape-time families are there too). ``promtool`` runs the rules'
unit tests when it is installed; ``make test-alerts`` is the gate that
requires it.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from webtest import TestApp

ROOT = Path(__file__).resolve().parent.parent
PROMETHEUS = ROOT / "ops" / "prometheus"
ALERTS = PROMETHEUS / "alerts.yml"
ALERTS_TEST = PROMETHEUS / "alerts_test.yml"
DASHBOARD = ROOT / "ops" / "grafana" / "dashboard.json"
#: A metric name of the package in an expression.
METRIC_RE = re.compile(r"\bopenprocurement_feed_[a-z0-9_]+\b")
#: Sample names of each metric type, from its family name.
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"), "gauge": ("",)}


def load_yaml(path: Path) -> Any:
    yaml = pytest.importorskip("yaml", reason="PyYAML is in the test extra: pip install -e '.[test]'")
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def alert_rules() -> list[dict[str, Any]]:
    groups = load_yaml(ALERTS)["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


def dashboard_exprs() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", ())]
    for variable in dashboard["templating"]["list"]:
        query = variable.get("query")
        if isinstance(query, dict):
            exprs.append(query["query"])
    return exprs


@pytest.fixture(scope="module")
def exported(mongodb_uri: str, mongo_client: Any) -> set[str]:
    """Every sample name the demo app's metrics path can serve."""
    import uuid

    from prometheus_client.parser import text_string_to_metric_families

    from openprocurement_feed import shutdown
    from openprocurement_feed.demo import main
    from openprocurement_feed.testing import make_settings

    settings = make_settings(mongodb_uri, f"ops_{uuid.uuid4().hex[:8]}")
    settings.update({"feed.order": "commit", "feed.sequencer": "thread", "feed.metrics_path": "/metrics"})
    web = TestApp(main({}, **settings))
    registry = web.app.registry
    try:
        assert registry.feed_sequencer.wait_ready(timeout=30)
        web.post_json("/api/2.5/tenders", {"data": {"title": "scraped"}})
        deadline = time.monotonic() + 15
        while True:
            text = web.get("/metrics").text
            if "openprocurement_feed_lag_window_seconds{" in text and "watcher_age_seconds{" in text:
                break
            assert time.monotonic() < deadline, "the scrape-time families appear"
            time.sleep(0.2)
        web.get("/api/2.5/tenders")
        families = list(text_string_to_metric_families(web.get("/metrics").text))
    finally:
        shutdown(registry)
        mongo_client.drop_database(settings["mongodb.db_name"])
    return {family.name + suffix for family in families for suffix in SUFFIXES.get(family.type, ("",))}


def test_every_alert_names_exported_metrics(exported: set[str]) -> None:
    rules = alert_rules()
    assert len(rules) >= 7
    for rule in rules:
        names = set(METRIC_RE.findall(rule["expr"]))
        assert names, f"alert {rule['alert']} uses no metric of the package"
        assert names <= exported, f"alert {rule['alert']}: not exported: {sorted(names - exported)}"


def test_every_dashboard_query_names_exported_metrics(exported: set[str]) -> None:
    exprs = dashboard_exprs()
    used = {name for expr in exprs for name in METRIC_RE.findall(expr)}
    assert used <= exported, f"not exported: {sorted(used - exported)}"
    for figure in (
        "openprocurement_feed_verdict",
        "openprocurement_feed_checkpoint_age_seconds",
        "openprocurement_feed_commit_lag_seconds_bucket",
        "openprocurement_feed_pages_total",
        "openprocurement_feed_longpoll_waiters",
    ):
        assert figure in used, f"the dashboard shows {figure}"


def test_the_alerts_cover_the_promise() -> None:
    """The alerts the operations page documents, each with a severity and
    a summary."""
    rules = {rule["alert"]: rule for rule in alert_rules()}
    assert set(rules) == {
        "FeedPromiseViolated",
        "FeedPromiseAtRisk",
        "FeedVerdictUnknown",
        "FeedCheckpointStale",
        "FeedSequencerGone",
        "FeedSequencerAbsent",
        "FeedPages5xx",
    }
    for name, rule in rules.items():
        assert rule["labels"]["severity"] in ("critical", "warning"), name
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], name
    documented = (ROOT / "docs" / "operations.rst").read_text(encoding="utf-8")
    for name in rules:
        assert f"``{name}``" in documented, f"docs/operations.rst documents {name}"


def test_every_alert_has_a_firing_and_a_quiet_case() -> None:
    """So that removing or breaking a rule fails ``promtool test rules``."""
    tests = load_yaml(ALERTS_TEST)
    assert tests["rule_files"] == ["alerts.yml"]
    firing: set[str] = set()
    quiet: set[str] = set()
    for case in tests["tests"]:
        for check in case.get("alert_rule_test", ()):
            (firing if check.get("exp_alerts") else quiet).add(check["alertname"])
    names = {rule["alert"] for rule in alert_rules()}
    assert names <= firing, f"never expected to fire: {sorted(names - firing)}"
    assert names <= quiet, f"never expected to stay quiet: {sorted(names - quiet)}"


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.skip("promtool is not installed (Debian package 'prometheus'); make test-alerts requires it")
    return found


def test_promtool_checks_and_tests_the_rules() -> None:
    tool = promtool()
    check = subprocess.run([tool, "check", "rules", str(ALERTS)], capture_output=True, text=True, check=False)
    assert check.returncode == 0, check.stdout + check.stderr
    result = subprocess.run(
        [tool, "test", "rules", ALERTS_TEST.name], cwd=PROMETHEUS, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_fails_when_a_rule_is_broken(tmp_path: Path) -> None:
    """The unit tests catch a rule that no longer fires (a threshold raised
    tenfold) and a rule that is gone."""
    tool = promtool()
    shutil.copy(ALERTS_TEST, tmp_path / ALERTS_TEST.name)
    source = ALERTS.read_text(encoding="utf-8")
    broken = source.replace(
        "openprocurement_feed_watcher_age_seconds) > 30", "openprocurement_feed_watcher_age_seconds) > 300"
    )
    assert broken != source
    start = source.index("      - alert: FeedPages5xx")
    for variant in (broken, source[:start]):
        (tmp_path / "alerts.yml").write_text(variant, encoding="utf-8")
        result = subprocess.run(
            [tool, "test", "rules", ALERTS_TEST.name], cwd=tmp_path, capture_output=True, text=True, check=False
        )
        assert result.returncode != 0, result.stdout


def test_promtool_parses_the_dashboard_queries(tmp_path: Path) -> None:
    """Each dashboard query, as a recording rule, passes promtool's parser."""
    tool = promtool()
    exprs = [expr.replace("$job", ".*") for expr in dashboard_exprs() if not expr.startswith("label_values(")]
    rules = {
        "groups": [
            {"name": "dashboard", "rules": [{"record": f"dashboard:q{n}", "expr": e} for n, e in enumerate(exprs)]}
        ]
    }
    path = tmp_path / "dashboard_rules.yml"
    path.write_text(json.dumps(rules), encoding="utf-8")  # JSON is YAML
    result = subprocess.run([tool, "check", "rules", str(path)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


EXAMPLES = ROOT / "examples"


def test_the_production_ini_parses_with_the_settings_parser(caplog: pytest.LogCaptureFixture) -> None:
    from pyramid.paster import get_appsettings

    from openprocurement_feed.settings import parse_settings

    with caplog.at_level("WARNING"):
        settings = parse_settings(get_appsettings(str(EXAMPLES / "production.ini")), {})
    assert not [record for record in caplog.records if "Unknown setting" in record.getMessage()]
    assert "replicaSet=" in settings.uri and settings.uri.startswith("mongodb://")
    assert (settings.read_preference, settings.write_concern) == ("primary", "majority")
    assert (settings.order, settings.sequencer) == ("commit", "off")
    assert settings.metrics_path == "/metrics"
    assert settings.health_permission
    assert settings.longpoll_max_waiters == 16
    # the environment still wins (credentials stay out of the file)
    uri = "mongodb://user:secret@localhost:27017/?replicaSet=rs0"
    assert parse_settings(get_appsettings(str(EXAMPLES / "production.ini")), {"MONGODB_URI": uri}).uri == uri


def test_the_production_ini_serves_the_demo_and_its_probes(mongodb_uri: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The ini loads as pserve and gunicorn --paste load it, on the test
    database (MONGODB_URI), with the metrics on."""
    from pyramid.paster import get_app

    from openprocurement_feed import shutdown

    monkeypatch.setenv("MONGODB_URI", mongodb_uri)
    monkeypatch.setenv("DB_NAME", "ops_production_ini")
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    app = get_app(str(EXAMPLES / "production.ini"))
    web = TestApp(app)
    try:
        assert web.get("/api/2.5/feeds/health/live").json == {"status": "alive"}
        assert web.get("/api/2.5/feeds/health/ready").json == {"status": "ready"}
        assert "openprocurement_feed_pages_total" in web.get("/metrics").text
        web.get("/api/2.5/tenders", status=503)  # commit order, no sequencer yet
    finally:
        app.registry.feed_store.db.client.drop_database("ops_production_ini")
        shutdown(app.registry)


def load_gunicorn_config(monkeypatch: pytest.MonkeyPatch, directory: Path) -> Any:
    """examples/gunicorn.conf.py as gunicorn loads it (a Python file), with
    ``PROMETHEUS_MULTIPROC_DIR`` pointing at ``directory``."""
    import runpy
    import types

    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(directory))
    return types.SimpleNamespace(**runpy.run_path(str(EXAMPLES / "gunicorn.conf.py")))


def test_the_gunicorn_config_sets_several_threaded_workers(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    config = load_gunicorn_config(monkeypatch, tmp_path / "metrics")
    assert config.workers >= 2 and config.worker_class == "gthread"
    assert config.threads >= 2 * 16, "twice feed.longpoll_max_waiters of production.ini"
    assert config.graceful_timeout > 55, "above feed.longpoll_max_seconds"
    assert config.preload_app is False
    for hook in ("on_starting", "child_exit", "worker_exit", "on_exit"):
        assert callable(getattr(config, hook)), hook


def test_the_gunicorn_config_defaults_the_multiproc_dir(tmp_path: Path) -> None:
    """Without the variable, the config sets it (under RUNTIME_DIRECTORY) for
    the workers it forks."""
    import os
    import sys

    env = {key: value for key, value in os.environ.items() if key != "PROMETHEUS_MULTIPROC_DIR"}
    env["RUNTIME_DIRECTORY"] = str(tmp_path)
    code = (
        "import runpy, os; runpy.run_path('examples/gunicorn.conf.py'); print(os.environ['PROMETHEUS_MULTIPROC_DIR'])"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(tmp_path / "prometheus")


def test_the_gunicorn_hooks_create_and_clean_the_metrics_directory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import types

    directory = tmp_path / "metrics"
    config = load_gunicorn_config(monkeypatch, directory)
    assert not directory.exists()
    config.on_starting(None)
    assert directory.is_dir(), "created before the first worker"
    # files as workers 101 and 102 leave them (prometheus_client's names)
    for name in ("counter_101.db", "gauge_livesum_101.db", "counter_102.db", "gauge_livesum_102.db"):
        (directory / name).write_bytes(b"")
    (directory / "keep.txt").write_text("not ours")
    config.child_exit(None, types.SimpleNamespace(pid=101))
    left = sorted(path.name for path in directory.iterdir())
    assert left == ["counter_101.db", "counter_102.db", "gauge_livesum_102.db", "keep.txt"], (
        "the dead worker's live gauges are gone, its counters still count"
    )
    config.on_starting(None)  # a restart of the master: a clean slate
    assert sorted(path.name for path in directory.iterdir()) == ["keep.txt"]
    (directory / "counter_103.db").write_bytes(b"")
    config.on_exit(None)
    assert sorted(path.name for path in directory.iterdir()) == ["keep.txt"]


def test_the_gunicorn_worker_exit_shuts_the_app_down(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import types

    config = load_gunicorn_config(monkeypatch, tmp_path)
    calls: list[Any] = []
    monkeypatch.setattr("openprocurement_feed.shutdown", calls.append)
    registry = object()
    config.worker_exit(None, types.SimpleNamespace(wsgi=types.SimpleNamespace(registry=registry)))
    config.worker_exit(None, types.SimpleNamespace())  # no app loaded yet: nothing to stop
    assert calls == [registry]


@pytest.mark.parametrize("unit", ["openprocurement-feed-web.service", "openprocurement-feed-sequencer.service"])
def test_the_systemd_units(unit: str) -> None:
    import configparser

    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read(EXAMPLES / "systemd" / unit, encoding="utf-8")
    service = parser["Service"]
    command = " ".join(service["ExecStart"].replace("\\", " ").split())
    assert service["EnvironmentFile"].startswith("-/etc/openprocurement-feed/")
    assert parser["Install"]["WantedBy"] == "multi-user.target"
    if "web" in unit:
        assert "gunicorn --paste /etc/openprocurement-feed/production.ini" in command
        assert "--config /etc/openprocurement-feed/gunicorn.conf.py" in command
        assert service["RuntimeDirectory"] == "openprocurement-feed"
        assert int(service["TimeoutStopSec"]) > 60, "above gunicorn's graceful_timeout"
    else:
        assert command.endswith("openprocurement-feed sequence --observe /etc/openprocurement-feed/production.ini")
        assert service["Restart"] == "always" and service["KillSignal"] == "SIGTERM"
