"""The commit feed's commit-to-visible delay while the reconcile aggregates
build: a probe that writes one test tender a second through the commit
order's web process (``POST``, ``"mode": "test"``) and polls that feed's
``mode=test`` view, newest first, until the tender shows.

Test tenders stay out of the measured feed (``mode=""``), of the copy the
in-sync check and ``verify`` compare with and of the reconcile records the
build waits for: the probe measures the shared path (the change stream, the
sequencer's batches, the keeper beside them) without changing what the
other figures measure.
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass, field

import requests

from ..common import percentile

#: Seconds between two probe writes.
WRITE_EVERY = 1.0
#: Seconds between two polls of the feed for the probe's tender.
POLL_EVERY = 0.05
#: Seconds a probe tender may take to show before it counts as not shown.
SHOW_TIMEOUT = 60.0


@dataclass
class VisibleProbe:
    """Writes and times probe tenders on ``api`` (the commit order's API
    root) from :meth:`start` to :meth:`stop`."""

    api: str
    #: seconds from each write's acknowledgement to its first sight in the feed
    delays: list[float] = field(default_factory=list)
    #: probe tenders not seen within :data:`SHOW_TIMEOUT`, or whose write failed
    missed: int = 0
    failed: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="visible-probe", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(SHOW_TIMEOUT + 10)

    def _run(self) -> None:
        with requests.Session() as http:
            while not self._stop.is_set():
                began = time.monotonic()
                self._probe(http)
                self._stop.wait(max(0.0, WRITE_EVERY - (time.monotonic() - began)))

    def _probe(self, http: requests.Session) -> None:
        try:
            response = http.post(
                f"{self.api}/tenders", json={"data": {"title": "visibility probe", "mode": "test"}}, timeout=30
            )
        except requests.RequestException:
            self.failed += 1
            return
        acked = time.monotonic()
        if response.status_code != 201:
            self.failed += 1
            return
        ident = response.json()["data"]["id"]
        deadline = acked + SHOW_TIMEOUT
        while time.monotonic() < deadline:
            with contextlib.suppress(requests.RequestException, ValueError, KeyError):
                page = http.get(
                    f"{self.api}/tenders", params={"mode": "test", "descending": "1", "limit": "10"}, timeout=30
                )
                if page.status_code == 200 and any(item["id"] == ident for item in page.json()["data"]):
                    self.delays.append(time.monotonic() - acked)
                    return
            time.sleep(POLL_EVERY)
        self.missed += 1

    def figures(self) -> dict[str, float]:
        """``visible_p50``/``visible_p99``/``visible_max`` (seconds),
        ``visible_probes`` and ``visible_missed`` (counts)."""
        found: dict[str, float] = {
            "visible_probes": float(len(self.delays) + self.missed + self.failed),
            "visible_missed": float(self.missed + self.failed),
        }
        if self.delays:
            found["visible_p50"] = percentile(self.delays, 0.5)
            found["visible_p99"] = percentile(self.delays, 0.99)
            found["visible_max"] = max(self.delays)
        return found
