"""The production-shaped test's load: the seed's sample tenders, and the
demo's patch writer recording when each version was acknowledged."""

from __future__ import annotations

from collections import Counter
from typing import Any


def recording_writer_class() -> type:
    """The demo's patch writer, keeping the time each version was
    acknowledged (imported late: ``requests`` is checked first)."""
    from openprocurement_feed.demo.load import PatchWriter

    class RecordingWriter(PatchWriter):
        """A :class:`~openprocurement_feed.demo.load.PatchWriter` that keeps
        ``acks[(id, dateModified)]``, the time each version was acknowledged,
        and ``refused``, the count of each HTTP status other than 200 (its
        other errors are connection errors)."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.acks: dict[tuple[str, str], float] = {}
            self.refused: Counter[int] = Counter()
            self.http.hooks["response"].append(self.answered)

        def answered(self, response: Any, *args: Any, **kwargs: Any) -> None:
            if response.status_code != 200:
                self.refused[response.status_code] += 1

        def acknowledged(self, tender_id: str, date_modified: str, acked: float) -> None:
            super().acknowledged(tender_id, date_modified, acked)
            self.acks[(tender_id, date_modified)] = acked

    return RecordingWriter


def seed_tenders(api: str, small: int, large: int, seed: int) -> tuple[list[str], list[str]]:
    """Create the seed's sample tenders as the race experiment does (8
    clients at once): the ids of the small ones (1 item) and the large ones
    (10 items with long texts)."""
    from openprocurement_feed.race.load import create_many

    return (
        create_many(api, small, large=False, seed=seed * 10),
        create_many(api, large, large=True, seed=seed * 10 + 1),
    )
