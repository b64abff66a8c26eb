"""The wire format of Negentropy V1: varints, bounds, and every malformed message.

Every malformed form raises ProtocolError with a sentence naming what is
wrong and the byte where it is, before the storage is asked anything.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from openprocurement_feed.reconcile import (
    Bound,
    FrameSizeError,
    Item,
    Negentropy,
    ProtocolError,
    UnsupportedVersion,
    VectorStorage,
    decode_varint,
    encode_varint,
)
from openprocurement_feed.reconcile.wire import MessageWriter, decode_message

ID = bytes(range(32))


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (0, "00"),
        (1, "01"),
        (127, "7f"),
        (128, "8100"),
        (255, "817f"),
        (16383, "ff7f"),
        (16384, "818000"),
        (1_700_000_001, "86aacfe201"),
        (2**64 - 1, "81ffffffffffffffff7f"),
    ],
)
def test_varint_known_values(value: int, encoded: str) -> None:
    assert encode_varint(value).hex() == encoded
    assert decode_varint(bytes.fromhex(encoded), 0) == (value, len(encoded) // 2)


@given(st.integers(min_value=0, max_value=2**64 - 1), st.binary(max_size=4))
def test_varint_round_trip(value: int, tail: bytes) -> None:
    data = b"\x07" + encode_varint(value) + tail
    assert decode_varint(memoryview(data), 1) == (value, len(data) - len(tail))


@pytest.mark.parametrize("value", [-1, 2**64])
def test_varint_refuses_values_outside_64_bits(value: int) -> None:
    with pytest.raises(ValueError, match=re.escape("outside 0..2**64-1")):
        encode_varint(value)


@pytest.mark.parametrize(
    ("data", "pos", "message"),
    [
        (b"", 0, "truncated varint at byte 0: the message ends there"),
        (b"\x61\x81", 1, "truncated varint at byte 1: the message ends inside it"),
        (b"\x61\x80\x01", 1, "non-minimal varint at byte 1: a leading zero digit"),
        (b"\x82" + b"\x80" * 9 + b"\x00", 0, "varint over 64 bits at byte 0"),
    ],
)
def test_varint_errors(data: bytes, pos: int, message: str) -> None:
    with pytest.raises(ProtocolError) as error:
        decode_varint(data, pos)
    assert str(error.value) == message


class NoStorage:
    """A storage that fails the test when the protocol asks it anything."""

    def size(self) -> int:
        raise AssertionError("the storage was asked for its size")

    def get_item(self, i: int) -> Item:
        raise AssertionError("the storage was asked for an item")

    def iterate(self, begin: int, end: int) -> Iterator[Item]:
        raise AssertionError("the storage was asked for items")

    def find_lower_bound(self, begin: int, end: int, bound: Bound) -> int:
        raise AssertionError("the storage was asked for a bound")

    def fingerprint(self, begin: int, end: int) -> bytes:
        raise AssertionError("the storage was asked for a fingerprint")


HOSTILE = [
    (b"", "empty message: no protocol version byte"),
    (b"\x05\x00\x00\x00", "invalid protocol version byte 0x05 at byte 0: 0x60 + version expected"),
    (b"\x61\x81", "truncated varint at byte 1: the message ends inside it"),
    (b"\x61\x02\x00", "truncated varint at byte 3: the message ends there"),
    (b"\x61\x80\x01\x00\x00", "non-minimal varint at byte 1: a leading zero digit"),
    (b"\x61" + b"\xff" * 10 + b"\x00\x00\x00", "varint over 64 bits at byte 1"),
    (b"\x61\x00\x21" + b"\x01" * 33 + b"\x00", "bound id prefix of 33 bytes at byte 2: at most 32"),
    (b"\x61\x05\x05ab", "truncated bound id prefix at byte 3: 5 bytes needed, 2 left in the message"),
    (b"\x61\x05\x00\x03", "bad mode 3 at byte 3: expected 0 skip, 1 fingerprint, 2 id list"),
    (b"\x61\x05\x00\x81\x00", "bad mode 128 at byte 3: expected 0 skip, 1 fingerprint, 2 id list"),
    (b"\x61\x05\x00\x01" + b"\x00" * 5, "truncated fingerprint at byte 4: 16 bytes needed, 5 left in the message"),
    (
        b"\x61\x05\x00\x02\x02" + ID,
        "id list longer than the message at byte 4: 2 ids need 64 bytes, 32 left",
    ),
    (
        b"\x61\x05\x00\x02" + encode_varint(10**9),
        "id list longer than the message at byte 4: 1000000000 ids need 32000000000 bytes, 0 left",
    ),
    (
        b"\x61\x06\x01\x02\x00\x01\x01\x01\x00",
        "bound out of order at byte 5: (5, 01) is below the previous bound (5, 02)",
    ),
    (
        b"\x61\x06\x01\x02\x00\x01\x00\x00",
        "bound out of order at byte 5: (5, -) is below the previous bound (5, 02)",
    ),
    (b"\x61\x00\x00\x00\x00\x00\x00", "range after the bound at infinity at byte 4: the last range ends there"),
]


@pytest.mark.parametrize(("message", "expected"), HOSTILE, ids=[text.split(" at ")[0] for _, text in HOSTILE])
def test_hostile_messages_are_refused_before_any_storage_call(message: bytes, expected: str) -> None:
    for side in ("responder", "initiator"):
        negentropy = Negentropy(NoStorage())
        with pytest.raises(ProtocolError) as error:
            if side == "responder":
                negentropy.reconcile(message)
            else:
                negentropy.reconcile_initiator(message)
        assert str(error.value) == expected
        assert type(error.value) is ProtocolError


def test_equal_bounds_make_an_empty_range() -> None:
    """A range whose bound equals the previous one is empty, not out of order."""
    ranges = decode_message(b"\x61\x06\x01\x02\x00\x01\x01\x02\x00")
    assert [r.bound for r in ranges] == [Bound(5, b"\x02"), Bound(5, b"\x02")]
    # A shorter prefix that pads to the same bytes is the same bound.
    ranges = decode_message(b"\x61\x06\x01\x02\x00\x01\x02\x02\x00\x00")
    assert ranges[1].bound.key() == ranges[0].bound.key()


@pytest.mark.parametrize("version", [0x60, 0x62, 0x6F])
def test_another_version_gets_the_one_byte_answer(version: int) -> None:
    responder = Negentropy(NoStorage())
    with pytest.raises(UnsupportedVersion) as error:
        responder.reconcile(bytes((version, 0xAA, 0xBB)))
    assert error.value.answer == b"\x61"
    assert str(error.value) == (
        f"protocol version {version - 0x60} (byte 0x{version:02x}) is not supported: this side speaks version 1"
    )
    with pytest.raises(UnsupportedVersion):
        Negentropy(NoStorage()).reconcile_initiator(bytes((version,)))


def test_a_message_over_the_responders_limit_is_refused() -> None:
    responder = Negentropy(NoStorage(), frame_size_limit=4096)
    message = b"\x61" + b"\x00" * 4096
    with pytest.raises(FrameSizeError) as error:
        responder.reconcile(message)
    assert str(error.value) == "message of 4097 bytes over the frame size limit of 4096 bytes"


def test_the_initiator_reads_answers_over_its_own_limit() -> None:
    """The responder may have a larger limit: its answers are read whole."""
    items = [Item(1, bytes([i]) * 32) for i in range(1, 200)]
    initiator = Negentropy(VectorStorage.of([]), frame_size_limit=4096)
    responder = Negentropy(VectorStorage.of(items), frame_size_limit=0)
    answer = responder.reconcile(initiator.initiate())
    assert len(answer) > 4096
    message, have, need = initiator.reconcile_initiator(answer)
    assert message is None and have == [] and sorted(need) == sorted(item.id for item in items)


@pytest.mark.parametrize("limit", [-1, 1, 4095])
def test_frame_size_limits_below_the_minimum_are_refused(limit: int) -> None:
    with pytest.raises(ValueError, match="0 \\(no limit\\) or at least 4096 bytes"):
        Negentropy(VectorStorage.of([]), frame_size_limit=limit)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_random_bytes_are_an_answer_or_a_protocol_error(data: bytes) -> None:
    storage = VectorStorage.of(Item(t, bytes([t]) * 32) for t in range(40))
    for message in (data, b"\x61" + data):
        try:
            Negentropy(storage).reconcile(message)
        except ProtocolError:
            pass
        try:
            Negentropy(storage).reconcile_initiator(message)
        except ProtocolError:
            pass


def test_the_writer_encodes_timestamps_as_differences() -> None:
    writer = MessageWriter()
    data = writer.skip(Bound(10)) + writer.fingerprint(Bound(10, b"\x07"), b"\x01" * 16) + writer.skip(Bound(2**64 - 1))
    assert data.hex() == "0b0000" + "010107" + "01" + "01" * 16 + "000000"
    ranges = decode_message(b"\x61" + data)
    assert [(r.bound, r.mode) for r in ranges] == [(Bound(10), 0), (Bound(10, b"\x07"), 1), (Bound(2**64 - 1), 0)]
    with pytest.raises(ValueError, match="below the previous one"):
        writer.bound(Bound(3))


def test_timestamps_saturate_at_infinity() -> None:
    """A difference that goes past the largest timestamp reads as infinity, like the reference."""
    message = b"\x61" + encode_varint(2**64 - 10) + b"\x00\x00" + encode_varint(100) + b"\x00\x00"
    ranges = decode_message(message)
    assert ranges[0].bound == Bound(2**64 - 11)
    assert ranges[1].bound.is_infinity
