"""The production-shaped test's Prometheus: its configuration (one scrape
target, the shipped rules, every second), the server started and ready,
instant queries, and the watch of the alert's states."""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .clock import Clock
from .deployment import ALERT, ALERTS, Failure
from .processes import Processes


def start_server(
    processes: Processes, promtool: str, prometheus: str, workdir: Path, port: int, target: str, clock: Clock
) -> str:
    """Write the configuration (scraping ``target``, a base URL, with the
    rules of :data:`ALERTS`), check it with promtool, start Prometheus on
    ``port`` and wait until it is ready and scrapes the target; its URL."""
    import requests

    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(ALERTS)],
        "scrape_configs": [
            {
                # one target: a scrape of any worker is the sum of all
                # the host's workers (prometheus_client multi-process)
                "job_name": "openprocurement-feed",
                "metrics_path": "/metrics",
                "static_configs": [{"targets": [target.removeprefix("http://")]}],
            }
        ],
    }
    path = workdir / "prometheus.yml"
    path.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")  # JSON is YAML
    checked = subprocess.run([promtool, "check", "config", str(path)], capture_output=True, text=True, timeout=60)
    if checked.returncode:
        raise Failure(f"promtool check config {path} failed:\n{checked.stdout}{checked.stderr}")
    url = f"http://127.0.0.1:{port}"
    processes.start(
        "prometheus",
        [
            prometheus,
            f"--config.file={path}",
            f"--storage.tsdb.path={workdir / 'prometheus-data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
    )

    def ready() -> bool:
        try:
            return requests.get(f"{url}/-/ready", timeout=2).status_code == 200
        except requests.RequestException:
            return False

    clock.wait_for("Prometheus ready", ready, 60, 0.5)
    clock.wait_for(
        "Prometheus scraping the web workers (target up)",
        lambda: query(url, "up") == [1.0],
        30,
        0.5,
    )
    return url


def query(url: str, expr: str) -> list[float]:
    """The values of an instant query at the Prometheus of ``url``."""
    import requests

    try:
        answer = requests.get(f"{url}/api/v1/query", params={"query": expr}, timeout=5).json()
    except (requests.RequestException, ValueError):
        return []
    return [float(sample["value"][1]) for sample in answer.get("data", {}).get("result", [])]


def query_by(url: str, expr: str, labels: Sequence[str]) -> dict[str, float]:
    """An instant query's values by the ``/``-joined values of ``labels``."""
    import requests

    try:
        answer = requests.get(f"{url}/api/v1/query", params={"query": expr}, timeout=5).json()
        return {
            "/".join(sample["metric"].get(label, "") for label in labels): float(sample["value"][1])
            for sample in answer["data"]["result"]
        }
    except (requests.RequestException, ValueError, KeyError) as error:
        raise Failure(f"Prometheus did not answer the query {expr}: {error}") from None


@dataclass
class AlertEvent:
    """A state of an alert seen at the Prometheus API: ``state`` is
    ``pending``, ``firing`` or ``inactive`` (no longer listed)."""

    at: float
    feed: str
    state: str


class AlertWatch(threading.Thread):
    """Polls Prometheus's ``/api/v1/alerts`` and records every change of the
    state of :data:`ALERT` per feed, and the names of any other alert."""

    def __init__(self, url: str, clock: Clock, every: float = 0.5) -> None:
        super().__init__(name="alert-watch", daemon=True)
        self.url = url
        self.clock = clock
        self.every = every
        self.events: list[AlertEvent] = []
        self.states: dict[str, str] = {}
        self.others: set[str] = set()
        self.errors = 0
        self.lock = threading.Lock()
        self.stopping = threading.Event()

    def run(self) -> None:
        import requests

        session = requests.Session()
        while not self.stopping.wait(self.every):
            try:
                alerts = session.get(f"{self.url}/api/v1/alerts", timeout=5).json()["data"]["alerts"]
            except (requests.RequestException, ValueError, KeyError):
                self.errors += 1
                continue
            self.note(alerts)
        session.close()

    def note(self, alerts: list[dict[str, Any]]) -> None:
        """Record what one answer of ``/api/v1/alerts`` changed."""
        now = self.clock.now()
        current = {}
        for alert in alerts:
            labels = alert.get("labels", {})
            if labels.get("alertname") == ALERT:
                current[labels.get("feed", "")] = alert.get("state", "")
            else:
                self.others.add(f"{labels.get('alertname')} ({alert.get('state')})")
        with self.lock:
            for feed in set(current) | set(self.states):
                state = current.get(feed, "inactive")
                if self.states.get(feed, "inactive") != state:
                    self.events.append(AlertEvent(now, feed, state))
                self.states[feed] = state

    def state(self, feed: str) -> str:
        with self.lock:
            return self.states.get(feed, "inactive")

    def first(self, feed: str, state: str, after: float = 0.0) -> float | None:
        """When ``feed``'s alert first turned ``state`` at or after ``after``."""
        with self.lock:
            return next((e.at for e in self.events if e.feed == feed and e.state == state and e.at >= after), None)
