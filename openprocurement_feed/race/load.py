"""The experiment's load: sample tenders created in parallel and writers that
log every acknowledged patch (for the feed delay)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from ..demo.load import Access, PatchWriter, create_tenders


class LoggingWriter(PatchWriter):
    """A :class:`~openprocurement_feed.demo.load.PatchWriter` that also keeps
    ``acks``: ``(id, dateModified, ack_time)`` of every patch the API accepted."""

    def __init__(
        self,
        base_url: str,
        ids: list[str],
        rate: float = 0.0,
        seed: int | None = None,
        name: str = "writer",
        access: Access | None = None,
    ) -> None:
        super().__init__(base_url, ids, rate=rate, seed=seed, name=name, access=access)
        self.acks: list[tuple[str, str, float]] = []

    def acknowledged(self, tender_id: str, date_modified: str, acked: float) -> None:
        super().acknowledged(tender_id, date_modified, acked)
        self.acks.append((tender_id, date_modified, acked))


def create_many(
    api_url: str,
    count: int,
    large: bool,
    workers: int = 8,
    seed: int | None = None,
    access: Access | None = None,
) -> list[str]:
    """Create ``count`` tenders with up to ``workers`` parallel clients; their
    ids (and their tokens in ``access``)."""
    if count <= 0:
        return []
    workers = max(1, min(workers, count))
    shares = [count // workers + (1 if number < count % workers else 0) for number in range(workers)]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [
            pool.submit(
                create_tenders,
                api_url,
                share,
                large,
                None if seed is None else seed * 1000 + number,
                access=access,
            )
            for number, share in enumerate(shares)
            if share
        ]
        return [tender_id for future in futures for tender_id in future.result()]
