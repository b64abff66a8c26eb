"""The records of a feed's objects (SPEC G.1): what both sides reconcile.

One record per object: its ``dateModified`` in microseconds since the Unix
epoch (UTC) as the timestamp, and a 32-byte id made of the object id's 16
bytes (its 32 hexadecimal digits) and the first 16 bytes of SHA-256 of the
ASCII text ``"<id>|<timestamp>"`` (the id in lower-case hex, the timestamp
in decimal). Two versions of an object are two records; the first half of a
record id names the object.
"""

from __future__ import annotations

import hashlib
import re
from datetime import datetime, timedelta, timezone

from .items import Item

__all__ = ["is_feed_id", "micros", "object_id", "record", "record_id", "shown_record", "timestamp_us"]

_FEED_ID = re.compile(r"[0-9a-fA-F]{32}")
_ISO = re.compile(
    r"(?P<date>\d{4}-\d{2}-\d{2})[T ](?P<time>\d{2}:\d{2}:\d{2})(?:\.(?P<fraction>\d{1,9}))?"
    r"(?P<zone>Z|z|[+-]\d{2}:?\d{2})"
)
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MICROSECOND = timedelta(microseconds=1)


def is_feed_id(object_id: str) -> bool:
    """Whether ``object_id`` can make a record: 32 hexadecimal digits."""
    return isinstance(object_id, str) and _FEED_ID.fullmatch(object_id) is not None


def timestamp_us(date_modified: str) -> int:
    """``date_modified`` (ISO 8601 with a UTC offset) in microseconds since the epoch, UTC.

    Digits of a second past the sixth are dropped. Raises ValueError on a text
    that is not such a date, on a date without its offset and on one before 1970.
    """
    if not isinstance(date_modified, str):
        raise ValueError(f"dateModified {date_modified!r} is not a string")
    match = _ISO.fullmatch(date_modified.strip())
    if match is None:
        raise ValueError(f"dateModified {date_modified!r} is not an ISO 8601 date and time with a UTC offset")
    zone = match["zone"]
    if zone in ("Z", "z"):
        zone = "+00:00"
    elif ":" not in zone:
        zone = f"{zone[:3]}:{zone[3:]}"
    fraction = (match["fraction"] or "")[:6].ljust(6, "0")
    try:
        moment = datetime.fromisoformat(f"{match['date']}T{match['time']}.{fraction}{zone}")
    except ValueError as error:
        raise ValueError(f"dateModified {date_modified!r}: {error}") from None
    micros = (moment - _EPOCH) // _MICROSECOND
    if micros < 0:
        raise ValueError(f"dateModified {date_modified!r} is before 1970")
    return micros


def micros(moment: datetime) -> int:
    """``moment`` in whole microseconds since the epoch, exactly (no float on
    the way); a naive datetime is taken as UTC."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return (moment - _EPOCH) // _MICROSECOND


def record_id(object_id: str, timestamp: int) -> bytes:
    """The 32-byte record id of version ``timestamp`` (µs) of object ``object_id``."""
    if not is_feed_id(object_id):
        raise ValueError(f"object id {object_id!r} is not 32 hexadecimal digits")
    lower = object_id.lower()
    digest = hashlib.sha256(f"{lower}|{timestamp}".encode("ascii")).digest()
    return bytes.fromhex(lower) + digest[:16]


def object_id(record_id: bytes) -> str:
    """The object id (lower-case hex) a record id names: the hex of its first 16 bytes."""
    if len(record_id) != 32:
        raise ValueError(f"record id of {len(record_id)} bytes, not 32")
    return record_id[:16].hex()


def record(object_id: str, date_modified: str) -> Item:
    """The record of an object's version: its timestamp and record id."""
    timestamp = timestamp_us(date_modified)
    return Item(timestamp, record_id(object_id, timestamp))


def shown_record(object_id: str, date_modified: object) -> Item | None:
    """The record of an object as a feed shows it, or None when its
    ``dateModified`` gives no version (missing, not a date, before 1970).

    The one rule every side applies: the keeper's aggregates, the
    endpoint's reads without them, the client's copies. Raises ValueError
    for an id that is not 32 hexadecimal digits: a feed that shows one
    cannot be reconciled.
    """
    if not is_feed_id(object_id):
        raise ValueError(f"object id {object_id!r} is not 32 hexadecimal digits")
    if not isinstance(date_modified, str):
        return None
    try:
        timestamp = timestamp_us(date_modified)
    except ValueError:
        return None
    return Item(timestamp, record_id(object_id, timestamp))
