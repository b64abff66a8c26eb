"""The soak's writers: the seed's patch writers on one shared schedule, and
a creator that makes new tenders with an ``Idempotency-Key`` (so that the
key collection is measured), each write's acknowledgement kept for the
commit-to-visible delay and the loss check."""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections import Counter
from typing import Any

import requests

from openprocurement_feed.demo.load import Pacer, PatchWriter, sample_tender


class Acks:
    """Every acknowledged version ``(id, dateModified)`` with the time it was
    acknowledged, in acknowledgement order, shared by the writers; and the
    HTTP statuses other than the expected one, by status."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.log: list[tuple[float, tuple[str, str]]] = []
        self.refused: Counter[int] = Counter()
        self.failed = 0
        self.creates = 0

    def add(self, object_id: str, date_modified: str, at: float) -> None:
        with self.lock:
            self.log.append((at, (object_id, date_modified)))

    def count(self) -> int:
        with self.lock:
            return len(self.log)

    def since(self, start: int, until: float) -> tuple[list[tuple[float, tuple[str, str]]], int]:
        """The acknowledgements from index ``start`` made before ``until``,
        and the index after them."""
        with self.lock:
            end = start
            while end < len(self.log) and self.log[end][0] < until:
                end += 1
            return self.log[start:end], end


class SoakWriter(PatchWriter):
    """A :class:`~openprocurement_feed.demo.load.PatchWriter` whose
    acknowledgements go to the shared :class:`Acks`."""

    def __init__(self, *args: Any, acks: Acks, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.acks = acks
        self.http.hooks["response"].append(self.answered)

    def answered(self, response: Any, *args: Any, **kwargs: Any) -> None:
        if response.status_code != 200:
            with self.acks.lock:
                self.acks.refused[response.status_code] += 1

    def acknowledged(self, tender_id: str, date_modified: str, acked: float) -> None:
        super().acknowledged(tender_id, date_modified, acked)
        self.acks.add(tender_id, date_modified, acked)


class Creator(threading.Thread):
    """Creates a small tender every ``1 / rate`` seconds with a fresh
    ``Idempotency-Key`` (a failed create is retried once with the same key,
    as a client should); each new id joins ``targets`` (a writer's list, so
    new objects are patched too)."""

    def __init__(self, api: str, rate: float, acks: Acks, targets: list[Any], seed: int = 1) -> None:
        super().__init__(name="creator", daemon=True)
        self.api = api
        self.interval = 1.0 / rate
        self.acks = acks
        self.targets = targets
        # bandit B311: sample documents, not secrets
        self.rng = random.Random(seed)  # nosec B311
        self.stopping = threading.Event()
        self.http = requests.Session()

    def stop(self) -> None:
        self.stopping.set()

    def create_once(self) -> None:
        body = {"data": sample_tender(self.rng)}
        headers = {"Idempotency-Key": str(uuid.UUID(int=self.rng.getrandbits(128)))}
        for _ in range(2):
            try:
                response = self.http.post(f"{self.api}/tenders", json=body, headers=headers, timeout=30)
            except requests.RequestException:
                with self.acks.lock:
                    self.acks.failed += 1
                continue
            if response.status_code == 201:
                data = response.json()["data"]
                self.acks.add(data["id"], data["dateModified"], time.time())
                with self.acks.lock:
                    self.acks.creates += 1
                self.targets.append(data["id"])
                return
            with self.acks.lock:
                self.acks.refused[response.status_code] += 1

    def run(self) -> None:
        next_at = time.monotonic()
        while not self.stopping.is_set():
            self.create_once()
            next_at = max(next_at + self.interval, time.monotonic() - 1.0)
            self.stopping.wait(max(0.0, next_at - time.monotonic()))
        self.http.close()


def start_writers(api: str, ids: list[str], rate: float, writers: int, create_rate: float, acks: Acks) -> list[Any]:
    """``writers`` patch writers on one :class:`Pacer` at ``rate`` patches/s
    over ``ids``, and a :class:`Creator` at ``create_rate`` creates/s (none
    at 0); all started."""
    pacer = Pacer(rate)
    threads: list[Any] = [
        SoakWriter(api, ids, pacer=pacer, seed=1000 + n, name=f"writer-{n}", acks=acks) for n in range(writers)
    ]
    if create_rate > 0:
        threads.append(Creator(api, create_rate, acks, threads[0].ids))
    for thread in threads:
        thread.start()
    return threads


def stop_writers(threads: list[Any]) -> None:
    """Ask every writer to stop, then wait for each."""
    for thread in threads:
        thread.stop()
    for thread in threads:
        thread.join(timeout=30)
