"""The cursor codec: every format of SPEC A, round trips, the clamp, and every
malformed shape rejected."""

from __future__ import annotations

import hashlib
from datetime import datetime

import pytest
from bson.timestamp import Timestamp
from hypothesis import given
from hypothesis import strategies as st

from openprocurement_feed.store.offset import (
    InvalidOffset,
    Offset,
    _as_python310_iso,
    compose_offset,
    compose_position,
    ids_digest,
    is_position_offset,
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
    "raw, seconds, narrow",
    [
        ("2026-05-12T14:00:00.5+03:00", 1778583600.5, "2026-05-12T14:00:00.500000+03:00"),  # one fraction digit
        ("2026-05-12T11:00:00Z", 1778583600.0, "2026-05-12T11:00:00+00:00"),
        ("2026-05-12T14:00:00.1234567+0300", 1778583600.123456, "2026-05-12T14:00:00.123456+03:00"),
        ("2026-05-12T08:00:00-0300", 1778583600.0, "2026-05-12T08:00:00-03:00"),
        ("2026-05-12T11:00:00.123+00:00", 1778583600.123, "2026-05-12T11:00:00.123000+00:00"),
    ],
)
def test_iso_dates_read_the_same_on_every_python(raw: str, seconds: float, narrow: str) -> None:
    """Python 3.10's ``fromisoformat`` reads a narrower form than 3.11's:
    there the codec rewrites a date in that form first, so every supported
    Python reads a legacy offset the same."""
    assert parse_offset(raw).value == pytest.approx(seconds, abs=1e-6)
    assert _as_python310_iso(raw) == narrow
    assert datetime.fromisoformat(narrow).timestamp() == pytest.approx(seconds, abs=1e-6)


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
    value=st.floats(min_value=1e7, max_value=4e9, allow_nan=False, allow_infinity=False),
    ids=st.lists(st.text("0123456789abcdef", min_size=32, max_size=32), min_size=1, max_size=20),
)
def test_round_trip(value: float, ids: list[str]) -> None:
    """Any epoch-seconds value (eight or more integer digits, so ``repr`` has
    no exponent and at most nine fractional digits) survives the trip.
    Smaller values can collide with the legacy ``public_ts`` shape:
    :func:`test_small_values_with_ten_fractional_digits_are_not_read_back`."""
    offset = parse_offset(compose_offset(value, ids), max_count=1000)
    assert offset.value == value
    assert offset.count == len(ids)
    assert offset.digest == ids_digest(ids)


@pytest.mark.parametrize(
    "value, read_as",
    [
        (0.0123456789, Timestamp(0, 123456789)),
        (1234567.0123456789, Timestamp(1234567, 123456789)),
        (65536.8086158454, None),  # the "increment" exceeds 2**32 - 1: invalid
    ],
)
def test_small_values_with_ten_fractional_digits_are_not_read_back(value: float, read_as: Timestamp | None) -> None:
    """SPEC A's parse order puts the legacy ``public_ts`` shape (exactly ten
    digits after the first dot) before the float: a ``public_modified``
    below 10**7 whose ``repr`` has ten fractional digits is read back as a
    cluster time, or rejected. No ``$$NOW`` stamp is that small; the codec's
    round trip holds from 10**7 on (:func:`test_round_trip`)."""
    raw = compose_offset(value, ["a"])
    assert is_position_offset(raw)
    if read_as is None:
        with pytest.raises(InvalidOffset):
            parse_offset(raw)
    else:
        assert parse_offset(raw).value == read_as


@given(st.text(max_size=80))
def test_any_text_parses_or_is_invalid(raw: str) -> None:
    try:
        offset = parse_offset(raw)
    except InvalidOffset:
        return
    assert isinstance(offset.value, (float, Timestamp))
    assert 0 <= offset.count <= 1000


# -- position offsets (SPEC D.9) ----------------------------------------------

MAX_UINT32 = 2**32 - 1
stamps = st.builds(Timestamp, st.integers(0, MAX_UINT32), st.integers(0, MAX_UINT32))
id_lists = st.lists(st.text("0123456789abcdef", min_size=32, max_size=32), min_size=1, max_size=20)
#: ``public_modified`` values as the store writes them: epoch seconds (at
#: least eight integer digits), any fraction, or milliseconds exactly.
watermark_values = st.one_of(
    st.floats(min_value=1e7, max_value=4e9, allow_nan=False, allow_infinity=False),
    st.integers(10**7 * 1000, 4 * 10**9 * 1000).map(lambda ms: ms / 1000.0),
)


def test_compose_position_writes_the_legacy_public_ts_shape() -> None:
    """Seconds, the increment as exactly ten digits, the tie count and the
    md5 of the sorted ids: ``"{seconds}.{increment:010d}.{n}.{h}"``."""
    raw = compose_position(Timestamp(1778583600, 7), ["b", "a"])
    assert raw == "1778583600.0000000007.2." + hashlib.md5(b"ab").hexdigest()
    assert compose_position(Timestamp(0, 0), ["x"]).startswith("0.0000000000.1.")
    assert compose_position(Timestamp(MAX_UINT32, MAX_UINT32), ["x"]).startswith("4294967295.4294967295.1.")


@given(position=stamps, ids=id_lists)
def test_position_round_trip(position: Timestamp, ids: list[str]) -> None:
    """Every cluster time and tie group survives compose → parse, read as a
    cluster time (never as a ``public_modified`` float)."""
    offset = parse_offset(compose_position(position, ids), max_count=1000)
    assert offset.value == position
    assert isinstance(offset.value, Timestamp)
    assert offset.is_position
    assert offset.field == "public_ts"
    assert offset.count == len(ids)
    assert offset.digest == ids_digest(ids)


@given(position=stamps, ids=id_lists)
def test_position_leads_with_a_float_of_its_seconds(position: Timestamp, ids: list[str]) -> None:
    """A crawler that reads the offset's leading ``{seconds}.{increment}`` as
    a float (for a cool-down) gets the position's second: the increment is
    below 2**32, so its ten digits stay a fraction below 0.43 and never
    round the seconds up, even at 2**32 - 1 where a double keeps only
    about seven fractional digits."""
    raw = compose_position(position, ids)
    leading = float(".".join(raw.split(".")[:2]))
    assert int(leading) == position.time
    assert position.time <= leading < position.time + 0.5
    assert leading == pytest.approx(position.time + position.inc / 1e10, abs=1e-6)


@given(position=stamps, ids=id_lists)
def test_positions_are_recognised_as_positions(position: Timestamp, ids: list[str]) -> None:
    """``is_position_offset`` tells a position from a watermark offset by
    its shape alone, with or without the tie part."""
    raw = compose_position(position, ids)
    assert is_position_offset(raw)
    assert is_position_offset(".".join(raw.split(".")[:2]))  # the legacy public_ts form


@pytest.mark.parametrize("raw", ["1778583600.0000000007", "0.0000000000", "1778583600.0000000007.0.h"])
def test_legacy_public_ts_offsets_are_positions(raw: str) -> None:
    """A legacy ``public_ts`` offset *is* a cluster time: the commit order
    reads it natively."""
    assert is_position_offset(raw)
    assert parse_offset(raw).is_position


@given(value=watermark_values, ids=id_lists)
def test_watermark_offsets_are_never_positions(value: float, ids: list[str]) -> None:
    """No offset the watermark order writes for an epoch-seconds
    ``public_modified`` looks like a position: ``repr`` of such a float has
    at most nine fractional digits, a position exactly ten. Such offsets
    keep parsing as floats."""
    raw = compose_offset(value, ids)
    assert not is_position_offset(raw)
    assert not is_position_offset(".".join(raw.split(".")[:2]))
    offset = parse_offset(raw)
    assert not offset.is_position
    assert offset.value == value


@pytest.mark.parametrize(
    "raw",
    [
        "1778583600.49",  # bare float
        "1778583600",  # bare integer
        "1778583600.0",
        "2026-05-12T11:00:00+00:00",  # legacy ISO date
        "1778583600.123456789.1.h",  # nine fractional digits
        "1778583600.00000000007.1.h",  # eleven digits: a float, not a position
        "1778583600.0000000007.1",  # three parts
        "-1.0000000007.1.h",
        "1778583600.000000000٧.1.h",  # a non-ASCII digit
        "",
    ],
)
def test_other_shapes_are_not_positions(raw: str) -> None:
    """Watermark forms, legacy dates and near misses are not read as positions."""
    assert not is_position_offset(raw)


@pytest.mark.parametrize(
    "raw, count",
    [
        ("1778583600.0000000007.100000.bad", 1000),  # a huge count is clamped (SPEC B.1)
        ("1778583600.0000000007.-3.bad", 0),  # a negative count is not "unlimited"
        ("1778583600.0000000007.+2.h", 2),
        ("1778583600.0000000007.1000.h", 1000),
        ("1778583600.0000000007.0.h", 0),
    ],
)
def test_position_count_is_clamped(raw: str, count: int) -> None:
    """The tie count of a position offset is bounded like a watermark one's."""
    offset = parse_offset(raw, max_count=1000)
    assert offset.is_position
    assert offset.value == Timestamp(1778583600, 7)
    assert offset.count == count
    assert offset.digest == ("" if count == 0 else offset.digest)


@given(count=st.integers(-(10**12), 10**12), max_count=st.integers(1, 5000))
def test_position_count_stays_within_max_count(count: int, max_count: int) -> None:
    """Any integer count is clamped to ``[0, max_count]``; a zero count drops the digest."""
    offset = parse_offset(f"1778583600.0000000007.{count}.h", max_count=max_count)
    assert offset.count == min(max(count, 0), max_count)
    assert offset.digest == ("h" if offset.count else "")


def test_an_eleven_digit_increment_is_read_as_a_float() -> None:
    """SPEC A reads any second part that is not exactly ten digits as the
    fraction of a ``public_modified``: never as a cluster time."""
    offset = parse_offset("1778583600.00000000007.1.h")
    assert not offset.is_position
    assert offset.value == 1778583600.00000000007


@pytest.mark.parametrize(
    "raw",
    [
        "1778583600.4294967296.1.h",  # increment above 2**32 - 1
        "1778583600.9999999999.1.h",
        "4294967296.0000000000.1.h",  # seconds at 2**32
        "99999999999.0000000001.1.h",
        "1778583600.0000000007.x.h",  # non-integer count
        "1778583600.0000000007.1.5.h",  # five parts
        "1778583600.0000000007.1e3.h",
        "1778583600.0000000007..h",  # empty count
        "1778583600.0000000007.٣.h",  # non-ASCII digit count
        "1778583600.0000000007. 1.h",
        ".0000000007.1.h",  # no seconds
        "+1778583600.0000000007.1.h",
        "1778583600.0000000007.1.h\n",
    ],
)
def test_malformed_positions_are_invalid(raw: str) -> None:
    """Position-like offsets outside a cluster time's range or with a bad
    tie part are invalid offsets (404), never a 500."""
    with pytest.raises(InvalidOffset) as error:
        parse_offset(raw)
    assert str(error.value) == f"Invalid offset provided: {raw}"


@given(position=stamps, ids=id_lists, watermark=st.floats(0, 5), descending=st.booleans())
def test_a_watermark_feed_reads_a_position_a_margin_earlier(
    position: Timestamp, ids: list[str], watermark: float, descending: bool
) -> None:
    """A position offset read by a watermark feed becomes an exclusive
    ``public_modified`` bound at least ``1 s + W`` behind the position's
    second, in the direction of travel (duplicates, never losses)."""
    from openprocurement_feed.store.orders import CROSS_ORDER_MARGIN, WatermarkOrder

    offset = parse_offset(compose_position(position, ids))
    converted = WatermarkOrder(watermark).convert(offset, descending)
    assert not converted.is_position and converted.count == 0
    margin = CROSS_ORDER_MARGIN + watermark
    if descending:
        assert converted.value >= position.time + margin - 1e-6
    else:
        assert converted.value <= max(position.time - margin, 0.0) + 1e-6


@given(value=watermark_values, ids=id_lists, watermark=st.floats(0, 5), descending=st.booleans())
def test_a_commit_feed_reads_a_watermark_offset_a_margin_earlier(
    value: float, ids: list[str], watermark: float, descending: bool
) -> None:
    """A watermark offset read by a commit-ordered feed becomes an exclusive
    position at least ``1 s + W`` behind it, on a whole second (increment
    0, which no change event has)."""
    from openprocurement_feed.store.orders import COMMITTED_TS, CROSS_ORDER_MARGIN, CommitOrder

    converted = CommitOrder(watermark).convert(parse_offset(compose_offset(value, ids)), descending)
    assert isinstance(converted.value, Timestamp)
    assert converted.field == COMMITTED_TS and converted.count == 0
    assert converted.value.inc == 0
    margin = CROSS_ORDER_MARGIN + watermark
    if descending:
        assert converted.value.time >= min(value + margin, MAX_UINT32)
    else:
        assert converted.value.time <= value - margin


@given(position=stamps, ids=id_lists)
def test_a_commit_feed_reads_its_own_positions_as_they_are(position: Timestamp, ids: list[str]) -> None:
    """A position offset is read by the commit order exactly, on ``committed_ts``."""
    from openprocurement_feed.store.orders import COMMITTED_TS, CommitOrder

    offset = parse_offset(compose_position(position, ids))
    converted = CommitOrder(1.0).convert(offset, descending=False)
    assert (converted.value, converted.count, converted.digest) == (position, len(ids), ids_digest(ids))
    assert converted.field == COMMITTED_TS


def test_exclusive_upper_selects_what_the_inclusive_bound_did() -> None:
    """``$lte: v`` becomes ``$lt`` the next value: the same rows, for
    positions, doubles and integers (doubles may lie between integers)."""
    import math
    from typing import Any

    from bson.timestamp import Timestamp

    from openprocurement_feed.store.orders import exclusive_upper

    def bounded(bounds: dict[str, Any]) -> Any:
        query = {"k": dict(bounds), "is_public": True}
        exclusive_upper(query, "k")
        return query["k"]

    assert bounded({"$lte": Timestamp(10, 3)}) == {"$lt": Timestamp(10, 4)}
    assert bounded({"$lte": Timestamp(10, 2**32 - 1)}) == {"$lt": Timestamp(11, 0)}
    assert bounded({"$gte": 1.0, "$lte": 2.5}) == {"$gte": 1.0, "$lt": math.nextafter(2.5, math.inf)}
    assert bounded({"$lte": 5}) == {"$lt": math.nextafter(5.0, math.inf)}
    # the tighter of two upper bounds
    assert bounded({"$lt": Timestamp(9, 1), "$lte": Timestamp(10, 1)}) == {"$lt": Timestamp(9, 1)}
    assert bounded({"$lt": Timestamp(10, 9), "$lte": Timestamp(10, 1)}) == {"$lt": Timestamp(10, 2)}
    # nothing to do, or no known successor: unchanged
    assert bounded({"$gt": 1.0}) == {"$gt": 1.0}
    assert bounded({"$lte": "2026-01-01"}) == {"$lte": "2026-01-01"}
    assert bounded({"$lte": True}) == {"$lte": True}
