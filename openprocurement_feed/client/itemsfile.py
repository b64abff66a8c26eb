"""A crawler's copy as a JSON-lines file: what ``sync --out`` writes and
``verify --items`` reads.

One JSON object per line with at least ``id`` and ``dateModified`` (a feed
item, or a whole object with ``sync --fetch``); a line
``{"id": "<id>", "removed": true}`` takes the id out of the copy (``verify
--repair`` writes it for what the feed no longer shows). The newest line of
an id wins: a line with an older ``dateModified`` than the one already read
(an at-least-once delivery repeated after a restart) does not bring the older
version back; a removal line always applies, and a later version brings the
id back.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field

from ..reconcile.records import is_feed_id, timestamp_us


class ItemsFileError(ValueError):
    """The copy cannot be read: the file, or one line (its number in the message)."""


@dataclass
class ItemsCopy:
    """The copy as read: object id → ``dateModified`` as the file holds it."""

    path: str
    versions: dict[str, str] = field(default_factory=dict)
    lines: int = 0
    removed: int = 0

    def pairs(self) -> Iterator[tuple[str, str]]:
        """``(id, dateModified)`` of every object in the copy."""
        return iter(self.versions.items())

    def __len__(self) -> int:
        return len(self.versions)


def read_items(path: str | os.PathLike[str]) -> ItemsCopy:
    """Read the copy at ``path``.

    :raises ItemsFileError: the file cannot be opened, or a line is not a
        JSON object with a 32-hex-digit ``id`` and a readable
        ``dateModified`` (nor a removal line); the message names the line.
    """
    name = os.fspath(path)
    copy = ItemsCopy(name)
    stamps: dict[str, int] = {}
    try:
        stream = open(name, "rb")  # noqa: SIM115 - closed below; bytes, so that a bad line is named exactly
    except OSError as error:
        raise ItemsFileError(f"cannot read {name!r}: {error.strerror or error}") from None
    with stream:
        try:
            for number, raw in enumerate(stream, start=1):
                copy.lines = number
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as error:
                    raise ItemsFileError(f"{name}: line {number} is not UTF-8 text ({error.reason})") from None
                if not text.strip():
                    continue
                key, stamp, date_modified = _parse(text, name, number)
                if date_modified is None:
                    copy.removed += key in copy.versions
                    copy.versions.pop(key, None)
                    stamps.pop(key, None)
                elif stamp >= stamps.get(key, stamp):
                    copy.versions[key] = date_modified
                    stamps[key] = stamp
        except OSError as error:
            raise ItemsFileError(f"cannot read {name!r}: {error.strerror or error}") from None
    return copy


def _parse(text: str, name: str, number: int) -> tuple[str, int, str | None]:
    """``(id, µs, dateModified)`` of one line, ``dateModified`` None for a removal."""
    where = f"{name}: line {number}"
    try:
        line = json.loads(text)
    except ValueError as error:
        raise ItemsFileError(f"{where} is not JSON ({error}): {text.strip()[:80]!r}") from None
    if not isinstance(line, dict):
        raise ItemsFileError(f"{where} is not a JSON object: {text.strip()[:80]!r}")
    key = line.get("id")
    if not isinstance(key, str):
        raise ItemsFileError(f'{where} has no "id" string')
    if not is_feed_id(key.lower()):
        raise ItemsFileError(f"{where}: the id {key!r} is not 32 hexadecimal digits (a feed id)")
    key = key.lower()
    if line.get("removed") is True:
        return key, 0, None
    date_modified = line.get("dateModified")
    if not isinstance(date_modified, str):
        raise ItemsFileError(f'{where} ({key}) has no "dateModified" string (nor "removed": true)')
    try:
        stamp = timestamp_us(date_modified)
    except ValueError as error:
        raise ItemsFileError(f"{where} ({key}): {error}") from None
    return key, stamp, date_modified


__all__ = ["ItemsCopy", "ItemsFileError", "read_items"]
