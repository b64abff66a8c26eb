"""Ready-made handlers."""

from __future__ import annotations

import json
import os
from typing import IO, Any

from .sync import Batch


class JsonLinesWriter:
    """A handler that appends every item, as the feed served it (or, when
    the sync fetches objects, every whole object), as one JSON object per
    line to the file at ``path``.

    Each page is flushed and ``fsync``-ed before the handler returns, so the
    state file never points past items that are not on disk. After a crash
    the file may hold the last page twice (at-least-once) and, if the
    process died in the middle of a write, one truncated line: reopening the
    file ends that line first, so the items appended after it stay whole.
    """

    def __init__(self, path: str | os.PathLike[str], fsync: bool = True) -> None:
        self.path = os.fspath(path)
        self.fsync = fsync
        torn = _ends_without_newline(self.path)
        self.stream: IO[str] = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - open until close()
        if torn:
            self.stream.write("\n")
            self.stream.flush()
        self.lines = 0

    def __call__(self, batch: Batch) -> None:
        self.write(batch.objects if batch.objects is not None else batch.items)

    def write(self, items: list[dict[str, Any]]) -> None:
        """Append ``items`` and make them durable."""
        self.stream.write("".join(json.dumps(item, ensure_ascii=False, separators=(",", ":")) + "\n" for item in items))
        self.stream.flush()
        if self.fsync:
            os.fsync(self.stream.fileno())
        self.lines += len(items)

    def close(self) -> None:
        """Close the file."""
        self.stream.close()

    def __enter__(self) -> JsonLinesWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _ends_without_newline(path: str) -> bool:
    """True when the file at ``path`` exists, is not empty and its last byte
    is no newline (a write cut short by a crash)."""
    try:
        with open(path, "rb") as stream:
            stream.seek(0, os.SEEK_END)
            if stream.tell() == 0:
                return False
            stream.seek(-1, os.SEEK_END)
            return stream.read(1) != b"\n"
    except FileNotFoundError:
        return False
