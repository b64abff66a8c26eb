"""The cursor codec: every format of SPEC A, round trips, the clamp, and every
malformed shape rejected."""
from __future__ import annotations

import hashlib

import pytest
from bson.timestamp import Timestamp
from hypothesis import given, strategies as st

from openprocurement_feed.offset import (
    InvalidOffset,
    Offset,
    compose_offset,
    ids_digest,
    parse_offset,
)


def test_compose_uses_repr_count_and_md5_of_sorted_ids() -> None:
    raw = compose_offset(1778583600.49, ["b", "a"])
    assert raw == "1778583600.49.2." + hashlib.md5(b"ab").hexdigest()


def test_compose_integral_value_keeps_a_fraction() -> None:
    assert compose_offset(1778583600, ["x"]).startswith("1778583600.0.1.")


def test_parse_four_parts() -> None:
    offset = parse_offset("1778583600.49.3.abc")
    assert offset == Offset(1778583600.49, 3, "abc", "public_modified")


def test_parse_bare_float_and_integer() -> None:
    assert parse_offset("1778583600.49") == Offset(1778583600.49)
    assert parse_offset("1778583600") == Offset(1778583600.0)


def test_parse_legacy_public_ts() -> None:
    offset = parse_offset("1778583600.0000000007")
    assert offset.value == Timestamp(1778583600, 7)
    assert offset.field == "public_ts"
    assert offset.count == 0


def test_parse_legacy_iso_date_with_plus_decoded_as_space() -> None:
    offset = parse_offset("2026-05-12T14:00:00.396982 03:00")
    assert offset.value == pytest.approx(1778583600.396982)
    assert offset.field == "public_modified"
    assert parse_offset("2026-05-12T11:00:00+00:00").value == 1778583600.0


def test_naive_iso_date_is_utc() -> None:
    assert parse_offset("2026-05-12T11:00:00").value == 1778583600.0


@pytest.mark.parametrize(
    "raw, count",
    [
        ("1.5.100000.bad", 1000),  # SPEC B.1: a huge count is clamped
        ("1.5.-3.bad", 0),  # a negative count is not "unlimited"
        ("1.5.1000.h", 1000),
        ("1.5.0.h", 0),
    ],
)
def test_count_is_clamped(raw: str, count: int) -> None:
    assert parse_offset(raw, max_count=1000).count == count


def test_zero_count_drops_the_digest() -> None:
    assert parse_offset("1.5.0.abc").digest == ""


@pytest.mark.parametrize(
    "raw",
    [
        "",
        "bad",
        "1.5.x.abc",  # non-integer count
        "1.5.1.5e3.abc",
        "1.5.2",  # three parts
        "1.2.3.4.5",
        "nan",
        "inf",
        "-1",
        "1e5",
        "1.5e3",
        "0x10",
        "1_000",
        " 12",
        "12\n",
        "١٢٣",  # non-ASCII digits
        "1.٥",
        "1.5.1٢.h",
        '{"$gt": ""}',
        "$where",
        "9" * 300,
        "2026-13-45T00:00:00",
        "4294967296.0000000001",  # a Timestamp's seconds overflow 32 bits
        "1.9999999999",  # a Timestamp's increment overflows 32 bits
        "\x00",
    ],
)
def test_malformed_offsets_are_invalid(raw: str) -> None:
    with pytest.raises(InvalidOffset) as error:
        parse_offset(raw)
    assert str(error.value) == f"Invalid offset provided: {raw}"


@given(
    value=st.floats(min_value=1e-3, max_value=4e9, allow_nan=False, allow_infinity=False),
    ids=st.lists(st.text("0123456789abcdef", min_size=32, max_size=32), min_size=1, max_size=20),
)
def test_round_trip(value: float, ids: list[str]) -> None:
    """Any epoch-seconds value (repr without an exponent) survives the trip."""
    offset = parse_offset(compose_offset(value, ids), max_count=1000)
    assert offset.value == value
    assert offset.count == len(ids)
    assert offset.digest == ids_digest(ids)


@given(st.text(max_size=80))
def test_any_text_parses_or_is_invalid(raw: str) -> None:
    try:
        offset = parse_offset(raw)
    except InvalidOffset:
        return
    assert isinstance(offset.value, (float, Timestamp))
    assert 0 <= offset.count <= 1000
