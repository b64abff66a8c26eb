"""The wire format of Negentropy V1 messages: decoding, checking, encoding.

A message is the version byte ``0x61`` and a list of ranges; a range is its
exclusive upper bound, a mode and the mode's payload (nothing for a skip,
16 bytes for a fingerprint, a count and that many 32-byte ids for an id
list). A bound's timestamp is written as the difference to the previous
bound's plus one (0 for infinity), then the length of its id prefix and the
prefix.

:func:`decode_message` reads a whole message before anything is done with
it, so a malformed message fails before a storage is asked anything; every
failure is a :class:`~.errors.ProtocolError` naming the byte where it is.
:class:`MessageWriter` writes one.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import ProtocolError, UnsupportedVersion
from .fingerprint import FINGERPRINT_SIZE
from .items import ID_SIZE, MAX_TIMESTAMP, Bound
from .varint import decode_varint, encode_varint

__all__ = [
    "MODE_FINGERPRINT",
    "MODE_ID_LIST",
    "MODE_SKIP",
    "PROTOCOL_VERSION",
    "MessageWriter",
    "Range",
    "decode_message",
]

#: The version byte of Negentropy V1 (0x60 + 1).
PROTOCOL_VERSION = 0x61
#: The version bytes of Negentropy's versions (0x60 + version).
VERSION_BYTES = range(0x60, 0x70)
#: Mode 0: the sender does not process the range further.
MODE_SKIP = 0
#: Mode 1: the payload is the fingerprint of the sender's ids in the range.
MODE_FINGERPRINT = 1
#: Mode 2: the payload is the list of the sender's ids in the range.
MODE_ID_LIST = 2
_MODES = "0 skip, 1 fingerprint, 2 id list"


@dataclass(frozen=True, slots=True)
class Range:
    """One decoded range: its upper ``bound``, ``mode`` and payload, and where it starts."""

    bound: Bound
    mode: int
    offset: int
    fingerprint: bytes = b""
    ids: tuple[bytes, ...] = ()


class _Reader:
    """Reads a message from the start, keeping the position and the last timestamp."""

    def __init__(self, data: bytes | bytearray | memoryview) -> None:
        self.buf = memoryview(data)
        self.pos = 0
        self.last_timestamp = 0

    def remaining(self) -> int:
        return len(self.buf) - self.pos

    def varint(self) -> int:
        value, self.pos = decode_varint(self.buf, self.pos)
        return value

    def take(self, n: int, what: str) -> bytes:
        if self.remaining() < n:
            raise ProtocolError(
                f"truncated {what} at byte {self.pos}: {n} bytes needed, {self.remaining()} left in the message"
            )
        data = bytes(self.buf[self.pos : self.pos + n])
        self.pos += n
        return data

    def bound(self) -> Bound:
        encoded = self.varint()
        if encoded == 0 or self.last_timestamp == MAX_TIMESTAMP:
            timestamp = MAX_TIMESTAMP
        else:
            # A sum past the largest timestamp saturates to infinity, as the reference reads it.
            timestamp = min(self.last_timestamp + encoded - 1, MAX_TIMESTAMP)
        self.last_timestamp = timestamp
        length_at = self.pos
        length = self.varint()
        if length > ID_SIZE:
            raise ProtocolError(f"bound id prefix of {length} bytes at byte {length_at}: at most {ID_SIZE}")
        return Bound(timestamp, self.take(length, "bound id prefix"))


def check_version(data: bytes | bytearray | memoryview) -> None:
    """Raise unless ``data`` starts with the version byte of Negentropy V1."""
    if len(data) == 0:
        raise ProtocolError("empty message: no protocol version byte")
    version = data[0]
    if version not in VERSION_BYTES:
        raise ProtocolError(f"invalid protocol version byte 0x{version:02x} at byte 0: 0x60 + version expected")
    if version != PROTOCOL_VERSION:
        raise UnsupportedVersion(
            f"protocol version {version - 0x60} (byte 0x{version:02x}) is not supported: this side speaks version 1",
            answer=bytes((PROTOCOL_VERSION,)),
        )


def decode_message(data: bytes | bytearray | memoryview) -> list[Range]:
    """The ranges of a whole message, checked: raises :class:`ProtocolError` on any malformed part.

    Besides the grammar, bounds must not go down (an empty range between equal
    bounds is allowed) and no range may follow the bound at infinity.
    """
    check_version(data)
    reader = _Reader(data)
    reader.pos = 1
    ranges: list[Range] = []
    previous = Bound(0)
    while reader.remaining():
        offset = reader.pos
        bound = reader.bound()
        if previous.is_infinity:
            raise ProtocolError(f"range after the bound at infinity at byte {offset}: the last range ends there")
        if bound.key() < previous.key():
            raise ProtocolError(
                f"bound out of order at byte {offset}: ({bound.timestamp}, {bound.id_prefix.hex() or '-'}) "
                f"is below the previous bound ({previous.timestamp}, {previous.id_prefix.hex() or '-'})"
            )
        mode_at = reader.pos
        mode = reader.varint()
        if mode == MODE_SKIP:
            ranges.append(Range(bound, mode, offset))
        elif mode == MODE_FINGERPRINT:
            ranges.append(Range(bound, mode, offset, fingerprint=reader.take(FINGERPRINT_SIZE, "fingerprint")))
        elif mode == MODE_ID_LIST:
            count_at = reader.pos
            count = reader.varint()
            if count * ID_SIZE > reader.remaining():
                raise ProtocolError(
                    f"id list longer than the message at byte {count_at}: {count} ids need {count * ID_SIZE} bytes, "
                    f"{reader.remaining()} left"
                )
            block = reader.take(count * ID_SIZE, "id list")
            ids = tuple(block[i : i + ID_SIZE] for i in range(0, len(block), ID_SIZE))
            ranges.append(Range(bound, mode, offset, ids=ids))
        else:
            raise ProtocolError(f"bad mode {mode} at byte {mode_at}: expected {_MODES}")
        previous = bound
    return ranges


class MessageWriter:
    """Writes a message: the version byte, then ranges appended in ascending order.

    :meth:`bound` returns a bound's bytes and advances the timestamp that the
    next bound is written against, so a range built aside (and perhaps thrown
    away at a frame limit) is written with :meth:`bound` too.
    """

    def __init__(self) -> None:
        self.data = bytearray((PROTOCOL_VERSION,))
        self.last_timestamp = 0

    def bound(self, bound: Bound) -> bytes:
        """The bytes of ``bound``, written after the previous one."""
        if bound.is_infinity:
            self.last_timestamp = MAX_TIMESTAMP
            encoded = b"\0"
        else:
            delta = bound.timestamp - self.last_timestamp
            if delta < 0:
                raise ValueError(f"bound timestamp {bound.timestamp} below the previous one {self.last_timestamp}")
            self.last_timestamp = bound.timestamp
            encoded = encode_varint(delta + 1)
        return encoded + encode_varint(len(bound.id_prefix)) + bound.id_prefix

    def skip(self, bound: Bound) -> bytes:
        """A skip range up to ``bound``."""
        return self.bound(bound) + encode_varint(MODE_SKIP)

    def fingerprint(self, bound: Bound, fingerprint: bytes) -> bytes:
        """A fingerprint range up to ``bound``."""
        return self.bound(bound) + encode_varint(MODE_FINGERPRINT) + fingerprint

    def id_list(self, bound: Bound, ids: bytes, count: int) -> bytes:
        """An id list range up to ``bound``: ``count`` ids, concatenated in ``ids``."""
        return self.bound(bound) + encode_varint(MODE_ID_LIST) + encode_varint(count) + ids
