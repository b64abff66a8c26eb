"""What the production-shaped test watches besides Prometheus: a crawler's
output file as it grows, and the health view's checkpoint age (``--plot``)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from .clock import Clock
from .deployment import FEEDS


class OutputTail(threading.Thread):
    """Follows a crawler's ``--out`` file: the time each item version
    ``(id, dateModified)`` first appeared in it (``time.time()``)."""

    def __init__(self, path: Path) -> None:
        super().__init__(name=f"tail-{path.name}", daemon=True)
        self.path = path
        self.seen: dict[tuple[str, str], float] = {}
        self.lock = threading.Lock()
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.path.exists() and not self.stopping.wait(0.1):
            pass
        if self.stopping.is_set():
            return
        with open(self.path, encoding="utf-8") as stream:
            pending = ""
            while True:
                chunk = stream.read()
                if chunk:
                    pending += chunk
                    lines = pending.split("\n")
                    pending = lines.pop()
                    now = time.time()
                    with self.lock:
                        for line in lines:
                            if line.strip():
                                item = json.loads(line)
                                self.seen.setdefault((item["id"], item["dateModified"]), now)
                elif self.stopping.wait(0.05):
                    return

    def count(self) -> int:
        with self.lock:
            return len(self.seen)

    def has(self, versions: dict[str, str]) -> bool:
        with self.lock:
            return all((key, value) in self.seen for key, value in versions.items())

    def snapshot(self) -> dict[tuple[str, str], float]:
        with self.lock:
            return dict(self.seen)


class HealthSampler(threading.Thread):
    """Reads the health view every second and keeps the checkpoint's age of
    the first feed (for ``--plot``); a failed read keeps None."""

    def __init__(self, url: str, clock: Clock, every: float = 1.0) -> None:
        super().__init__(name="health-sampler", daemon=True)
        self.url = url
        self.clock = clock
        self.every = every
        self.samples: list[tuple[float, float | None]] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        import requests

        session = requests.Session()
        while not self.stopping.wait(self.every):
            age = None
            try:
                feeds = session.get(self.url, timeout=5).json()["feeds"]
                feed = next(item for item in feeds if item["name"] == FEEDS[0])
                age = (feed.get("checkpoint") or {}).get("age_seconds")
            except (requests.RequestException, ValueError, KeyError, StopIteration, AttributeError):
                pass
            self.samples.append((self.clock.now(), age if isinstance(age, (int, float)) else None))
        session.close()
