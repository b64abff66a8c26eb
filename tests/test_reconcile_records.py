"""The records of a feed's objects (SPEC G.1)."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from openprocurement_feed.reconcile import Item, is_feed_id, object_id, record, record_id, timestamp_us

OID = "0123456789abcdef0123456789abcdef"


@pytest.mark.parametrize(
    ("text", "micros"),
    [
        ("1970-01-01T00:00:00+00:00", 0),
        ("1970-01-01T00:00:00.000001Z", 1),
        ("2024-03-01T12:00:00.123456+02:00", 1709287200123456),
        ("2024-03-01T10:00:00.123456+00:00", 1709287200123456),
        ("2024-03-01T10:00:00.1234567+00:00", 1709287200123456),
        ("2024-03-01T10:00:00.5-0130", 1709292600500000),
        ("2024-03-01 10:00:00z", 1709287200000000),
    ],
)
def test_timestamps_in_microseconds_utc(text: str, micros: int) -> None:
    assert timestamp_us(text) == micros


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("2024-03-01T10:00:00", "not an ISO 8601 date and time with a UTC offset"),
        ("yesterday", "not an ISO 8601 date and time with a UTC offset"),
        ("2024-02-30T10:00:00+00:00", "day is out of range for month"),
        ("1969-12-31T23:59:59+00:00", "before 1970"),
        (17, "is not a string"),
    ],
)
def test_bad_dates_are_refused(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        timestamp_us(text)  # type: ignore[arg-type]


def test_record_ids() -> None:
    timestamp = 1709287200123456
    expected = bytes.fromhex(OID) + hashlib.sha256(f"{OID}|{timestamp}".encode()).digest()[:16]
    assert record_id(OID, timestamp) == expected
    assert record_id(OID.upper(), timestamp) == expected
    assert object_id(expected) == OID
    assert record(OID, "2024-03-01T12:00:00.123456+02:00") == Item(timestamp, expected)
    # Another version of the object is another record, named by the same object id.
    assert record_id(OID, timestamp + 1) != expected
    assert object_id(record_id(OID, timestamp + 1)) == OID


def test_record_ids_known_value() -> None:
    """The values of SPEC G.1 (the hash checked with sha256sum)."""
    assert record_id(OID, 0).hex() == OID + "69ace8221c8bb17ca3c369d1d15911ca"
    assert record_id(OID, 1709287200123456).hex() == OID + "93bd158c37842adfdb760f143f6a2399"


@pytest.mark.parametrize("bad", ["", "0123", OID + "0", "g" * 32, "UA-2024-03-01-000001-a", None])
def test_ids_that_make_no_record(bad: str) -> None:
    assert not is_feed_id(bad)
    with pytest.raises(ValueError, match="is not 32 hexadecimal digits"):
        record_id(bad, 1)


def test_object_id_needs_a_whole_record_id() -> None:
    with pytest.raises(ValueError, match="record id of 16 bytes, not 32"):
        object_id(b"\x00" * 16)


@given(st.uuids(), st.integers(0, 2**62))
def test_every_uuid_hex_makes_a_record(uuid: object, timestamp: int) -> None:
    hex_id = uuid.hex  # type: ignore[attr-defined]
    assert is_feed_id(hex_id)
    assert object_id(record_id(hex_id, timestamp)) == hex_id


def test_micros_is_exact_where_a_float_is_not() -> None:
    from datetime import datetime, timezone

    from openprocurement_feed.reconcile.records import micros

    moment = datetime(2262, 3, 1, 10, 0, 0, 7, tzinfo=timezone.utc)
    exact = 9219780000 * 1_000_000 + 7
    assert micros(moment) == exact
    assert micros(moment.replace(tzinfo=None)) == exact
    assert micros(moment) == timestamp_us(moment.isoformat())
    lossy = [
        m
        for m in range(1, 1000)
        if int(moment.replace(microsecond=m).timestamp() * 1_000_000) != micros(moment.replace(microsecond=m))
    ]
    assert lossy, "the float path should lose a microsecond somewhere: the test would prove nothing"


def test_shown_record_is_the_one_rule() -> None:
    from openprocurement_feed.reconcile.records import shown_record

    assert shown_record(OID, "2024-03-01T10:00:00+00:00") == record(OID, "2024-03-01T10:00:00+00:00")
    assert shown_record(OID.upper(), "2024-03-01T10:00:00+00:00") == record(OID, "2024-03-01T10:00:00+00:00")
    for no_version in (None, 17, "", "yesterday", "1969-12-31T23:59:59+00:00"):
        assert shown_record(OID, no_version) is None
    with pytest.raises(ValueError, match="32 hexadecimal digits"):
        shown_record("not-a-feed-id", "2024-03-01T10:00:00+00:00")
