"""The listing: what a commit-ordered feed's entries carry of their documents.

A positions entry (SPEC D.2) is the feed's materialized view of one
document, as CouchDB's by-sequence index carries its emitted values: besides
its position and filter fields, it holds every field any feed of its
collection may show (default fields, allowed ``opt_fields``) and the fields
the feeds' restricted rule reads, under their own names, copied from the
version of the document the entry was taken from. A commit page is then
rendered from the entries alone: an entry, projected, *is* the page's row
(no second dict per row, no nested document to decode).

The entry's own fields (:data:`ENTRY_FIELDS`) cannot be listed: a feed in
commit order that allows a document field of such a name is a configuration
error. ``is_public``, ``is_test``, ``public_modified`` and scope fields are
the document's own values in both.

A listing is a sorted tuple of dotted field paths in which no path lies
under another (``config`` covers ``config.restricted``): exactly what a
projection may name. The sequencer records the listing its entries carry in
the state document (:data:`STATE_LISTING`); the reader compares it with the
fields a page needs and fills whatever it lacks from the documents (SPEC
D.13).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

#: Fields an entry has of its own, never copied from the document.
ENTRY_FIELDS = frozenset({"_id", "committed_ts", "committed_seq", "rev", "deleted"})
#: The state document's field naming the listing every entry carries.
STATE_LISTING = "listing"
#: The state document's field naming the listing a re-materialization is
#: building (SPEC D.13); absent when none runs.
STATE_TARGET = "listing_target"
#: The state document's flag: every entry carries ``committed_seq`` (the
#: position as 16 hex digits, which pages project instead of the
#: ``Timestamp``: decoding a ``Timestamp`` costs the web process a Python
#: object per row, about 1 ms per 1000 rows, a short string nearly nothing).
STATE_SEQ = "seq"
#: Fields a page row has without the listing (never listing fields).
ROW_FIELDS = frozenset({"_id", "committed_ts", "committed_seq"})


def normalize(paths: Iterable[str]) -> tuple[str, ...]:
    """``paths`` as a listing: sorted, unique, without a path that lies under
    another one, without the entry's own fields."""
    unique = sorted({path for path in paths if path and path.split(".")[0] not in ENTRY_FIELDS})
    kept: list[str] = []
    for path in unique:
        if not any(path.startswith(parent + ".") for parent in kept):
            kept.append(path)
    return tuple(kept)


def covers(listing: Iterable[str], path: str) -> bool:
    """True when an entry of ``listing`` carries ``path``: the path itself or
    one of its parents is listed."""
    return any(path == name or path.startswith(name + ".") for name in listing)


def missing(listing: Iterable[str], fields: Iterable[str]) -> tuple[str, ...]:
    """The ``fields`` a page needs that entries of ``listing`` do not carry."""
    listed = tuple(listing)
    return tuple(name for name in fields if name not in ROW_FIELDS and not covers(listed, name))


def take(doc: Mapping[str, Any], listing: Iterable[str]) -> dict[str, Any]:
    """The values of ``listing`` in ``doc``, nested as in the document
    (``config.restricted`` → ``{"config": {"restricted": ...}}``); fields
    the document lacks are left out."""
    values: dict[str, Any] = {}
    for path in listing:
        if "." not in path:
            if path in doc:
                values[path] = doc[path]
            continue
        parts = path.split(".")
        value: Any = doc
        for part in parts:
            if not isinstance(value, Mapping) or part not in value:
                break
            value = value[part]
        else:
            target = values
            for part in parts[:-1]:
                target = target.setdefault(part, {})
            target[parts[-1]] = value
    return values


def merge(target: dict[str, Any], source: Mapping[str, Any]) -> None:
    """Merge ``source`` into ``target`` (in place), sub-documents field by
    field: the documents' values for the fields a listing lacks join the
    entry's own."""
    for key, value in source.items():
        existing = target.get(key)
        if isinstance(existing, dict) and isinstance(value, Mapping):
            merge(existing, value)
        else:
            target[key] = value
