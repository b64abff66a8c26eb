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
