"""Varints of Negentropy V1: base-128 digits, most significant first.

Every byte but the last has its high bit set, and a number takes as few
digits as possible. Values are unsigned 64-bit integers (timestamps, counts,
lengths, modes): anything larger, a leading zero digit (a non-minimal form)
or a message that ends inside a varint is a :class:`ProtocolError`.
"""

from __future__ import annotations

from .errors import ProtocolError

__all__ = ["MAX_VARINT", "decode_varint", "encode_varint"]

#: The largest value a varint carries (unsigned 64 bits).
MAX_VARINT = 2**64 - 1


def encode_varint(n: int) -> bytes:
    """The varint of ``n`` (0 <= n < 2**64)."""
    if n < 0 or n > MAX_VARINT:
        raise ValueError(f"varint value {n} outside 0..2**64-1")
    if n < 0x80:
        return bytes((n,))
    digits = bytearray()
    while n:
        digits.append(n & 0x7F)
        n >>= 7
    digits.reverse()
    for i in range(len(digits) - 1):
        digits[i] |= 0x80
    return bytes(digits)


def decode_varint(buf: memoryview | bytes | bytearray, pos: int) -> tuple[int, int]:
    """Read the varint that starts at ``buf[pos]``: ``(value, position after it)``.

    Raises :class:`ProtocolError` on a truncated varint, a non-minimal one
    (a leading zero digit) or one over 64 bits.
    """
    start = pos
    end = len(buf)
    if pos >= end:
        raise ProtocolError(f"truncated varint at byte {start}: the message ends there")
    byte = buf[pos]
    if byte == 0x80:
        raise ProtocolError(f"non-minimal varint at byte {start}: a leading zero digit")
    value = 0
    while True:
        if pos >= end:
            raise ProtocolError(f"truncated varint at byte {start}: the message ends inside it")
        byte = buf[pos]
        pos += 1
        value = (value << 7) | (byte & 0x7F)
        if value > MAX_VARINT:
            raise ProtocolError(f"varint over 64 bits at byte {start}")
        if not byte & 0x80:
            return value, pos
