"""The experiment's load: sample tenders created in parallel and writers that
log every acknowledged patch (for the feed delay)."""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import requests

from ..demo.load import WORDS, PatchWriter, create_tenders


class LoggingWriter(PatchWriter):
    """A :class:`~openprocurement_feed.demo.load.PatchWriter` that also keeps
    ``acks``: ``(id, dateModified, ack_time)`` of every patch the API accepted."""

    def __init__(
        self, base_url: str, ids: list[str], rate: float = 0.0,
        seed: int | None = None, name: str = "writer",
    ) -> None:
        super().__init__(base_url, ids, rate=rate, seed=seed, name=name)
        self.acks: list[tuple[str, str, float]] = []

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
            acked = time.time()
            date_modified = response.json()["data"]["dateModified"]
            self.stats.patches += 1
            self.stats.last[tender_id] = (date_modified, acked)
            self.acks.append((tender_id, date_modified, acked))
        else:
            self.stats.errors += 1


def create_many(api_url: str, count: int, large: bool, workers: int = 8, seed: int | None = None) -> list[str]:
    """Create ``count`` tenders with up to ``workers`` parallel clients; their ids."""
    if count <= 0:
        return []
    workers = max(1, min(workers, count))
    shares = [count // workers + (1 if number < count % workers else 0) for number in range(workers)]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [
            pool.submit(create_tenders, api_url, share, large,
                        None if seed is None else seed * 1000 + number)
            for number, share in enumerate(shares) if share
        ]
        return [tender_id for future in futures for tender_id in future.result()]
