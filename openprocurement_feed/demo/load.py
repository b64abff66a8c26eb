"""Load for the demo API over HTTP: sample tenders and background writers.

Used by ``openprocurement-feed run`` (a slow writer so the feed moves) and by
the race experiment (several fast writers). Needs the ``client`` extra
(``requests``).
"""
from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import requests

WORDS = (
    "supply of medical equipment construction works road repair school "
    "furniture software licences fuel electricity cleaning services catering "
    "laboratory reagents vehicles maintenance printing paper security"
).split()


def sample_tender(rng: random.Random, large: bool = False, mode: str | None = None) -> dict[str, Any]:
    """A tender body: small (1 item) or large (10 items with long texts)."""
    count = 10 if large else 1
    words = 60 if large else 6
    items = [
        {
            "id": f"{rng.getrandbits(64):016x}",
            "description": " ".join(rng.choice(WORDS) for _ in range(words)),
            "quantity": rng.randint(1, 500),
            "unit": {"name": "item", "code": "H87"},
        }
        for _ in range(count)
    ]
    data: dict[str, Any] = {
        "title": " ".join(rng.choice(WORDS) for _ in range(5)),
        "tenderID": f"UA-{rng.randint(2020, 2026)}-{rng.randint(1, 12):02d}-{rng.randint(1, 99999):05d}",
        "value": {"amount": round(rng.uniform(1000, 5_000_000), 2), "currency": "UAH"},
        "items": items,
    }
    if mode:
        data["mode"] = mode
    return data


def create_tenders(
    base_url: str, count: int, large: bool = False, seed: int | None = None,
    session: requests.Session | None = None, mode: str | None = None,
) -> list[str]:
    """Create ``count`` tenders through ``POST {base_url}/tenders``; their ids."""
    rng = random.Random(seed)
    http = session or requests.Session()
    ids = []
    for _ in range(count):
        response = http.post(
            f"{base_url}/tenders", json={"data": sample_tender(rng, large, mode)}, timeout=30
        )
        response.raise_for_status()
        ids.append(response.json()["data"]["id"])
    return ids


@dataclass
class WriterStats:
    """What a writer did: patches acknowledged, errors, and per tender the
    last acknowledged ``dateModified`` with the time it was acknowledged."""

    patches: int = 0
    errors: int = 0
    last: dict[str, tuple[str, float]] = field(default_factory=dict)


class PatchWriter(threading.Thread):
    """Patches random tenders of ``ids`` until stopped.

    :param rate: patches per second for this writer; 0 means as fast as the
        API answers.
    """

    def __init__(
        self, base_url: str, ids: list[str], rate: float = 0.0,
        seed: int | None = None, name: str = "writer",
    ) -> None:
        super().__init__(name=name, daemon=True)
        self.base_url = base_url
        self.ids = ids
        self.rate = rate
        self.rng = random.Random(seed)
        self.stats = WriterStats()
        self.stopping = threading.Event()
        self.http = requests.Session()

    def stop(self) -> None:
        """Ask the writer to finish its current patch and end."""
        self.stopping.set()

    def patch_once(self) -> None:
        tender_id = self.rng.choice(self.ids)
        body = {"data": {"title": " ".join(self.rng.choice(WORDS) for _ in range(5))}}
        try:
            response = self.http.patch(f"{self.base_url}/tenders/{tender_id}", json=body, timeout=30)
        except requests.RequestException:
            self.stats.errors += 1
            self.stopping.wait(0.2)
            return
        if response.status_code == 200:
            self.acknowledged(tender_id, response.json()["data"]["dateModified"], time.time())
        else:
            self.stats.errors += 1

    def acknowledged(self, tender_id: str, date_modified: str, acked: float) -> None:
        """Record a patch the API accepted (subclasses may keep more)."""
        self.stats.patches += 1
        self.stats.last[tender_id] = (date_modified, acked)

    def run(self) -> None:
        interval = 1.0 / self.rate if self.rate > 0 else 0.0
        next_at = time.monotonic()
        while not self.stopping.is_set():
            self.patch_once()
            if interval:
                next_at += interval
                self.stopping.wait(max(0.0, next_at - time.monotonic()))
        self.http.close()
