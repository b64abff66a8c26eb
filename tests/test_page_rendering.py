"""The page-rendering shortcuts give exactly what the plain forms give:
``query_string`` is ``urlencode``, ``boundary_ids`` is the tie group a full
scan finds on a sorted page, ``render_items`` is ``render_item`` per shown
row."""

from __future__ import annotations

from operator import itemgetter
from typing import Any
from urllib.parse import urlencode

from hypothesis import given
from hypothesis import strategies as st

from openprocurement_feed.feed.views import query_string, render_item, render_items
from openprocurement_feed.store.orders import boundary_ids

TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)


@given(st.dictionaries(TEXT, TEXT, max_size=5))
def test_query_string_is_urlencode(params: dict[str, str]) -> None:
    assert query_string(params) == urlencode(params)


@given(st.lists(st.sampled_from([1.0, 1.5, 2.0, 2.25]), max_size=30), st.booleans())
def test_boundary_ids_are_the_tie_groups_of_a_sorted_page(stamps: list[float], backwards: bool) -> None:
    rows = sorted(
        ({"_id": f"{number:04d}", "public_modified": stamp} for number, stamp in enumerate(stamps)),
        key=lambda row: (row["public_modified"], row["_id"]),
        reverse=backwards,
    )
    for value in set(stamps):
        at_value = [row["_id"] for row in rows if row["public_modified"] == value]
        if rows[0]["public_modified"] == value:
            assert boundary_ids(rows, itemgetter("public_modified"), value) == at_value
        if rows[-1]["public_modified"] == value:
            assert boundary_ids(reversed(rows), itemgetter("public_modified"), value) == at_value[::-1]
    assert boundary_ids(rows, itemgetter("public_modified"), -1.0) == []


@given(
    st.lists(
        st.fixed_dictionaries(
            {"_id": st.text(min_size=1, max_size=4)},
            optional={
                "dateModified": TEXT,
                "title": TEXT,
                "public_modified": st.floats(allow_nan=False),
            },
        ),
        max_size=20,
    ),
    st.lists(st.sampled_from(["dateModified", "title", "public_modified"]), unique=True),
)
def test_render_items_is_render_item_per_row(rows: list[dict[str, Any]], fields: list[str]) -> None:
    expected = [render_item(row, fields) for row in rows]
    rendered = render_items(rows, fields)
    assert rendered == expected
    assert [list(item) for item in rendered] == [list(item) for item in expected]  # key order too
