"""The feed cursor codec: pure functions, no I/O.

An offset is written as ``"{pm}.{n}.{h}"``: ``pm`` is ``repr(float)`` of the
boundary item's ``public_modified``, ``n`` the number of items *in the page*
that share that exact value and ``h`` the hex md5 of their ids, sorted and
concatenated. Older forms are still read: a bare float, a legacy ``public_ts``
offset (``"{seconds}.{10-digit increment}"``) and a legacy ISO-8601 date.

A commit-ordered feed (SPEC D) writes *position* offsets,
``"{seconds}.{increment:010d}.{n}.{h}"``: the boundary item's position (a
cluster time, :class:`bson.Timestamp`) in the legacy ``public_ts`` shape plus
the tie count and digest. Its leading ``{seconds}.{increment}`` still parses
as a float of seconds (crawlers read it for cool-downs), and its second part
of exactly ten digits cannot be mistaken for ``repr`` of a ``public_modified``
float (which never has ten fractional digits at epoch magnitudes).
"""

from __future__ import annotations

import hashlib
import math
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone

from bson.timestamp import Timestamp

OffsetValue = float | Timestamp

INTEGER_RE = re.compile(r"\d+", re.ASCII)
SIGNED_INTEGER_RE = re.compile(r"[+-]?\d+", re.ASCII)
LEGACY_INCREMENT_RE = re.compile(r"\d{10}", re.ASCII)
MAX_RAW_LENGTH = 256


class InvalidOffset(ValueError):
    """The ``offset`` query parameter cannot be read; ``raw`` is what was sent."""

    def __init__(self, raw: str) -> None:
        super().__init__(f"Invalid offset provided: {raw}")
        self.raw = raw


@dataclass(frozen=True)
class Offset:
    """A parsed cursor.

    ``value`` is a ``public_modified`` float or a :class:`bson.Timestamp`
    (a legacy ``public_ts`` offset or a commit-order position; ``field`` is
    then ``public_ts``). ``count`` and ``digest`` describe the items of the
    previous page at exactly ``value`` (``count == 0`` means the offset is
    exclusive).
    """

    value: OffsetValue
    count: int = 0
    digest: str = ""
    field: str = "public_modified"

    @property
    def is_position(self) -> bool:
        """True for a cluster-time offset (a position or a legacy ``public_ts``)."""
        return isinstance(self.value, Timestamp)


def ids_digest(ids: Iterable[str]) -> str:
    """The hex md5 of the ids sorted and concatenated (the ``h`` part)."""
    # a digest of ids in a cursor, not a security measure
    return hashlib.md5("".join(sorted(ids)).encode("utf-8"), usedforsecurity=False).hexdigest()


def compose_offset(value: float, ids_at_value: Iterable[str]) -> str:
    """Write the offset for a page whose boundary item has ``value``.

    ``ids_at_value`` are the ids of the page's items whose ``public_modified``
    equals ``value`` exactly (the boundary item included).
    """
    ids = list(ids_at_value)
    return f"{float(value)!r}.{len(ids)}.{ids_digest(ids)}"


def compose_position(position: Timestamp, ids_at_position: Iterable[str]) -> str:
    """Write the offset of a commit-ordered page whose boundary item sits at
    ``position``; ``ids_at_position`` are the page's ids at exactly it."""
    ids = list(ids_at_position)
    return f"{position.time}.{position.inc:010d}.{len(ids)}.{ids_digest(ids)}"


def is_position_offset(raw: str) -> bool:
    """True when ``raw`` is written in the cluster-time shape (a position or a
    legacy ``public_ts`` offset): the form a commit-ordered feed serves."""
    parts = raw.split(".")
    return (
        len(parts) in (2, 4) and bool(INTEGER_RE.fullmatch(parts[0])) and bool(LEGACY_INCREMENT_RE.fullmatch(parts[1]))
    )


#: The parts of an ISO-8601 date-time that ``datetime.fromisoformat`` reads
#: only from Python 3.11 on: a fraction of other than 3 or 6 digits, ``Z``,
#: and an offset without a colon.
_ISO_FRACTION_RE = re.compile(r"(T\d{2}:\d{2}:\d{2})[.,](\d+)")
_ISO_ZONE_RE = re.compile(r"(?:Z|([+-]\d{2})(\d{2}))$")


def _as_python310_iso(text: str) -> str:
    """``text`` in the narrower ISO form Python 3.10's ``fromisoformat``
    reads: the fraction padded or cut to microseconds, ``Z`` and ``+hhmm``
    written ``+hh:mm``."""
    text = _ISO_FRACTION_RE.sub(lambda match: f"{match[1]}.{(match[2] + '000000')[:6]}", text)
    return _ISO_ZONE_RE.sub(lambda match: f"{match[1]}:{match[2]}" if match[1] else "+00:00", text)


def _parse_iso(raw: str) -> float:
    text = raw.replace(" ", "+")
    if len(text) < 10 or not text[:4].isdigit():
        raise ValueError(raw)
    if sys.version_info < (3, 11):
        text = _as_python310_iso(text)
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.timestamp()


def parse_offset(raw: str, max_count: int = 1000) -> Offset:
    """Read an offset sent by a client.

    :param raw: the query parameter as received.
    :param max_count: the upper bound of ``n`` (the feed's ``max_limit``): a
        larger count is clamped, a negative one becomes 0.
    :raises InvalidOffset: when no known format matches.
    """
    if not raw or len(raw) > MAX_RAW_LENGTH or not raw.isprintable():
        raise InvalidOffset(raw)
    parts = raw.split(".")
    count, digest = 0, ""
    if len(parts) == 4:
        if not SIGNED_INTEGER_RE.fullmatch(parts[2]):
            raise InvalidOffset(raw)
        count = min(max(int(parts[2]), 0), max_count)
        digest = parts[3]
    if len(parts) in (2, 4) and INTEGER_RE.fullmatch(parts[0]) and INTEGER_RE.fullmatch(parts[1]):
        if LEGACY_INCREMENT_RE.fullmatch(parts[1]):
            try:
                stamp = Timestamp(int(parts[0]), int(parts[1]))
            except (TypeError, ValueError, OverflowError):
                raise InvalidOffset(raw) from None
            return Offset(stamp, count, digest if count else "", field="public_ts")
        value = float(parts[0] + "." + parts[1])
        if math.isfinite(value):
            return Offset(value, count, digest if count else "")
        raise InvalidOffset(raw)
    if len(parts) == 1 and INTEGER_RE.fullmatch(parts[0]):
        value = float(parts[0])
        if math.isfinite(value):
            return Offset(value)
        raise InvalidOffset(raw)
    try:
        return Offset(_parse_iso(raw))
    except (ValueError, OverflowError, OSError):
        raise InvalidOffset(raw) from None


def find_window(ids: Sequence[str], count: int, digest: str) -> int | None:
    """Find the run of ``count`` consecutive ``ids`` whose digest is ``digest``.

    Returns the index just past the run (everything before it was already
    served), or None when no run matches.
    """
    if count <= 0 or count > len(ids):
        return None
    for start in range(len(ids) - count + 1):
        if ids_digest(ids[start : start + count]) == digest:
            return start + count
    return None
