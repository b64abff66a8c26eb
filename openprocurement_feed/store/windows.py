"""A page read in bounded windows of its sort key (SPEC I.1).

A page is the first ``limit`` rows of a range of ``(key, _id)``. MongoDB
reads them off an index and stops at ``limit``; a server that gathers every
match of the range before it applies the limit (the embedded server does)
pays for the whole rest of the feed on every page, so a crawl costs O(n²).
:func:`read_windowed` asks instead for the rows of a window of the key just
past the offset, wide enough for the page by the density seen so far, and
goes on with the next window while the page is not full. Each row of a
window sorts before every row of the next one, so the rows the windows
bring, in turn, are exactly the page that one query over the whole range
returns: same rows, same order, whatever the data.

The first window of a page without a lower bound (ascending) or an upper one
(descending) is open on that side, and the last one is open on the far side
(past the present and a day of clock margin, or past the lowest key known):
no row is ever outside every window. The hints (the lowest key of a
collection and the density of its rows) only make the windows fit; a wrong
hint costs reads, never a row.

The lowest key itself is found by :func:`lowest_key` in reads of about a
page each: one sorted read of a whole collection with a limit of one is
exactly what such a server cannot do (at a million documents it gathers more
memory than the machine has).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from bson.timestamp import Timestamp

#: Seconds of the first window of a collection the hints know nothing of.
FIRST_WINDOW_SECONDS = 60.0
#: How much wider than the density asks a window is made (rows come unevenly).
SLACK = 1.5
#: How much a window grows at most from one read to the next.
MAX_GROWTH = 8.0
#: Seconds past the clock of this process that stamps may still reach
#: (another machine's clock): past them the last window is open.
CLOCK_MARGIN_SECONDS = 86400.0

#: Rows a probe of :func:`lowest_key` is sized for (by the density of the
#: feed's newest rows).
PROBE_ROWS = 100
#: Times :func:`lowest_key` bisects again below a row its probes missed (a
#: gap in the keys wider than a probe hid it) before it settles.
LOWEST_ROUNDS = 8
#: How much finer than a probe's width :func:`lowest_key` finds the lowest
#: key (a few more probes: the first page's first window then starts there).
PRECISION = 8.0
#: How much wider each window of :func:`lowest_key`'s reads down to the
#: floor is than the empty one before it (the floor is decades below).
SEARCH_GROWTH = 4.0
#: How much wider :func:`lowest_key`'s probes grow each time one fell in a
#: gap of the keys.
GAP_GROWTH = 16.0
#: Lowest keys one process keeps (one per collection, key and filters: a
#: scoped feed has one per scope), the oldest forgotten first.
MAX_LOWEST_KEYS = 4096

#: Runs a query with a limit: the page's rows in ``(key, _id)`` order.
Run = Callable[[Mapping[str, Any], int], list[dict[str, Any]]]


@dataclass
class WindowHints:
    """What one process learnt of a collection's keys: the lowest key (the
    start of an ascending first page) and the rows per second of key seen
    by the last page. Kept by the store, per collection and key."""

    #: lowest keys, per collection, key and filters: found by
    #: :func:`lowest_key`, then the first row of every page that starts at
    #: the lowest key
    lowest_keys: dict[tuple[str, ...], Any] = field(default_factory=dict)
    #: rows per second of key the last page of a collection, key and
    #: direction showed
    densities: dict[tuple[str, ...], float] = field(default_factory=dict)

    def learn_lowest(self, name: tuple[str, ...], value: Any) -> None:
        """Keep ``value`` as the lowest key of ``name`` (at most
        :data:`MAX_LOWEST_KEYS` names, the oldest forgotten first)."""
        self.lowest_keys.pop(name, None)
        self.lowest_keys[name] = value
        while len(self.lowest_keys) > MAX_LOWEST_KEYS:
            del self.lowest_keys[next(iter(self.lowest_keys))]


def shifted(value: Any, seconds: float) -> Any:
    """``value`` moved by ``seconds`` of key: a number of seconds or a
    ``Timestamp`` (its whole seconds); None for another type."""
    if isinstance(value, Timestamp):
        moved = max(0, min(int(value.time + seconds), 2**32 - 1))
        return Timestamp(moved, 0)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value + seconds
    return None


def span(low: Any, high: Any) -> float:
    """Seconds of key between two values of the same kind."""
    if isinstance(low, Timestamp) and isinstance(high, Timestamp):
        return float(high.time - low.time)
    return float(high - low)


def bounds(condition: Any, descending: bool) -> tuple[Any, Any]:
    """The near and far bounds a range condition on the key sets (the
    offset's side first), None where it sets none."""
    if not isinstance(condition, Mapping):
        return None, None
    low = condition.get("$gt", condition.get("$gte"))
    high = condition.get("$lt", condition.get("$lte"))
    return (high, low) if descending else (low, high)


def density_of(found: list[dict[str, Any]], value_of: Callable[[Mapping[str, Any]], Any], width: float) -> float:
    """Rows per second of key of a window's rows: over the span of their
    keys (``value_of(row)``) where they carry one (a window wider than its
    rows, or a read stopped by its limit, says too little), else over the
    window's width."""
    first, last = value_of(found[0]), value_of(found[-1])
    if len(found) > 1 and first is not None and last is not None and shifted(first, 0) is not None:
        try:
            return len(found) / max(abs(span(first, last)), 0.001)
        except TypeError:
            pass
    return len(found) / width


def branch_start(query: Mapping[str, Any], key: str, descending: bool) -> Any:
    """Where a query whose near bound on the key stands in ``$or`` branches
    (a tie group's rest: key past the value, or at it with a later ``_id``;
    a far bound, such as the watermark's, may stand beside them) starts:
    the loosest of the branches' near bounds; None when a branch does not
    bound the key."""
    branches = query.get("$or")
    if not isinstance(branches, list) or not branches:
        return None
    starts = []
    for branch in branches:
        condition = branch.get(key) if isinstance(branch, Mapping) else None
        if condition is None:
            return None
        near = bounds(condition, descending)[0] if isinstance(condition, Mapping) else condition
        if near is None:
            return None
        starts.append(near)
    try:
        return max(starts) if descending else min(starts)
    except TypeError:
        return None


def starts_at_lowest(query: Mapping[str, Any], key: str, descending: bool) -> bool:
    """Whether :func:`read_windowed` starts ``query``'s windows at the
    lowest key (an ascending page without a near bound on ``key``)."""
    condition = query.get(key)
    if descending or (condition is not None and not isinstance(condition, Mapping)):
        return False
    return bounds(condition, False)[0] is None and branch_start(query, key, False) is None


def read_windowed(
    run: Run,
    query: Mapping[str, Any],
    key: str,
    descending: bool,
    limit: int,
    lowest: Callable[[], Any],
    density: float | None,
    value_of: Callable[[Mapping[str, Any]], Any] | None = None,
    floor: Callable[[], Any] | None = None,
    growth: float = 2.0,
) -> tuple[list[dict[str, Any]], float | None]:
    """The first ``limit`` rows of ``query`` in ``(key, _id)`` order (the
    sort ``run`` applies), read in windows of ``key``; and the density (rows
    per second of key) they showed, for the next page's first window.

    :param lowest: the lowest key the collection may have (a hint, asked
        only where an ascending page starts at the lowest key); a
        descending page ends its windows at ``floor``'s value where it has
        one (the lowest key known, or the key's least value: no search),
        else at ``lowest()``.
    :param growth: how much wider the window after an empty one is.
    :param value_of: a row's value of ``key`` (default: its field ``key``;
        rows that carry their key in another form, such as the commit
        order's ``committed_seq``, say how to read it): the density is
        taken from the rows' own keys.
    """
    if value_of is None:

        def value_of(row: Mapping[str, Any]) -> Any:
            return row.get(key)

    condition = query.get(key)
    near, far = bounds(condition, descending)
    if limit <= 0 or (condition is not None and not isinstance(condition, Mapping)):
        return run(query, limit), density
    start = near if near is not None else branch_start(query, key, descending)
    if start is None:
        start = lowest() if not descending else far
        if start is None and descending:
            start = time.time() + CLOCK_MARGIN_SECONDS
    if start is None or shifted(start, 0) is None:
        return run(query, limit), density
    if far is not None:
        end = far
    elif not descending:
        end = time.time() + CLOCK_MARGIN_SECONDS
    else:
        end = floor() if floor is not None else lowest()
    if isinstance(start, Timestamp) and not isinstance(end, Timestamp) and end is not None:
        end = Timestamp(int(min(end, 2**32 - 1)), 0) if not descending else None
    width = limit / density * SLACK if density else FIRST_WINDOW_SECONDS
    rows: list[dict[str, Any]] = []
    edge = start  # the window's near side: past the rows read so far
    seen = density  # rows per second of key of the last window that had rows
    first = True
    while True:
        width = max(width, 1.0 if isinstance(edge, Timestamp) else 0.001)
        other = shifted(edge, -width if descending else width)
        last = end is None or (other <= end if descending else other >= end)
        window: dict[str, Any] = dict(condition) if isinstance(condition, Mapping) else {}
        if not first:  # past the rows already read: the near side moves
            for operator in ("$lt", "$lte") if descending else ("$gt", "$gte"):
                window.pop(operator, None)
            window["$lt" if descending else "$gte"] = edge
        if not last:
            window["$gte" if descending else "$lt"] = other
            if descending:
                window.pop("$gt", None)
            else:
                window.pop("$lte", None)
        windowed = dict(query)
        if window:
            windowed[key] = window
        else:
            windowed.pop(key, None)
        found = run(windowed, limit - len(rows))
        rows.extend(found)
        if found and (not last or len(found) > 1):
            # the last window (open on its far side) shows a density by its
            # rows' keys alone: without it, a density hint far too low made
            # every page's first window reach the end, and stayed
            seen = density_of(found, value_of, width)
        if len(rows) >= limit or last:
            return rows[:limit], seen
        # the next window: as wide as the last window's density asks for
        # the rest (a gap before it would make the page's own too low)
        wanted = (limit - len(rows)) / density_of(found, value_of, width) * SLACK if found else width * growth
        width = min(wanted, width * MAX_GROWTH)
        edge = other
        first = False


def scan_in_order(
    run: Run,
    query: Mapping[str, Any],
    key: str,
    chunk: int,
    lowest: Callable[[], Any],
) -> Iterator[dict[str, Any]]:
    """Every row of ``query`` in ``(key, _id)`` ascending order (the sort
    ``run`` applies), read ``chunk`` rows at a time in windows of ``key``:
    a whole collection's ordered scan without a sort of the whole collection
    on a server that gathers every match before its limit.

    Each read is a range of the key alone, so an index serves it on every
    server (a server's planner may scan the collection for an ``$or`` of
    ranges): the next read starts at the last row's key, inclusive, and the
    rows of that key already read are skipped; a tie group as large as a
    chunk is read on by ``_id`` within its key. ``lowest`` gives the lowest
    key of the rows (called once, where the first window starts). Rows
    without the key are not read: a range on the key does not match them.
    """
    density: float | None = None
    page: dict[str, Any] = dict(query)
    last_key: Any = None
    seen: set[Any] = set()  # the ids read of the rows at last_key (as hashable keys)
    while True:
        rows, density = read_windowed(run, page, key, False, chunk, lowest, density)
        fresh = [row for row in rows if row.get(key) != last_key or _hashable(row["_id"]) not in seen]
        yield from fresh
        if len(rows) < chunk:
            return
        top = rows[-1].get(key)
        if top != last_key:
            last_key, seen = top, set()
        seen.update(_hashable(row["_id"]) for row in rows if row.get(key) == top)
        if all(row.get(key) == top for row in rows):
            # a tie group fills the chunk: read the rest of it by _id, then go on past it
            yield from _rest_of_key(run, query, key, top, rows[-1]["_id"], chunk)
            page = {**query, key: {"$gt": top}}
            last_key, seen = None, set()
        else:
            page = {**query, key: {"$gte": top}}


def _rest_of_key(
    run: Run, query: Mapping[str, Any], key: str, value: Any, after: Any, chunk: int
) -> Iterator[dict[str, Any]]:
    """The rows of ``query`` at ``key == value`` past ``_id`` ``after``, by ``_id``."""
    while True:
        rows = run({**query, key: value, "_id": {"$gt": after}}, chunk)
        yield from rows
        if len(rows) < chunk:
            return
        after = rows[-1]["_id"]


def _hashable(value: Any) -> Any:
    """``value`` as a set member (an ``_id`` may be a document)."""
    try:
        hash(value)
    except TypeError:
        return repr(value)
    return value


def newest_row(run: Run, query: Mapping[str, Any], key: str, floor: Any) -> dict[str, Any] | None:
    """The row of ``query`` with the highest key at or above ``floor`` (a
    number of seconds or a ``Timestamp``; ``run`` sorts by ``(key, _id)``
    descending), read in windows down from the present: about a page's
    cost where the feed's newest rows are recent, whatever its size.

    Rows stamped ahead of this process's clock (another machine's) are
    looked for first, in one read of that range (normally empty), so that
    the windows start at the present and the first one to find rows is
    about as wide as the feed's quiet time, not a day.
    """
    present = shifted(floor, time.time())
    if present is None:
        return None
    rows = run({**query, key: {"$gte": present}}, 1)
    if not rows:
        bounded = {**query, key: {"$gte": floor, "$lt": present}}
        rows, _ = read_windowed(run, bounded, key, True, 1, lambda: floor, None)
    return rows[0] if rows else None


def lowest_key(
    ascending: Run,
    descending: Run,
    query: Mapping[str, Any],
    key: str,
    floor: Any,
    value_of: Callable[[Mapping[str, Any]], Any] | None = None,
) -> tuple[Any, float | None]:
    """A key at or below the lowest key of ``query``'s rows at or above
    ``floor`` (the key's least value: 0 seconds, the zero ``Timestamp``), close enough that a
    window of a probe's width above it holds few rows; None where there are
    no rows; and the density (rows per second of key) of the newest rows,
    for the first page's windows. ``ascending`` and ``descending`` sort by
    ``(key, _id)`` each way.

    No read gathers more than about :data:`PROBE_ROWS` rows at the density
    of the feed's newest ones, whatever the feed's size (a server without
    limit pushdown gathers every match of a read; one sorted read of the
    whole range is the whole collection):

    1. the newest row (:func:`newest_row`) and the :data:`PROBE_ROWS` rows
       before it, in windows down from it: where that is the whole feed, its
       oldest row is the answer; else their density sizes a probe;
    2. a bisection of the keys between ``floor`` and the oldest row known:
       each step reads one probe's width at the middle (limit one); a row
       there moves the top down to it, none moves the bottom up to the
       middle;
    3. a probe that fell in a gap of the keys wider than itself moved the
       bottom past rows: a descending windowed read from the bottom looks
       for the newest row below it, and the bisection starts again below
       that row with probes :data:`GAP_GROWTH` times wider (at most
       :data:`LOWEST_ROUNDS` times).

    On a feed without gaps wider than a probe, about 2 log2(keys between
    floor and the lowest / a probe's width) reads of a page's cost or less:
    some forty at a million tenders. The answer is a hint: a page's first
    window is open below it, so a wrong one costs reads, never a row.
    """
    if value_of is None:

        def value_of(row: Mapping[str, Any]) -> Any:
            return row.get(key)

    newest = newest_row(descending, query, key, floor)
    top = value_of(newest) if newest is not None else None
    above = shifted(top, 1.0)
    if above is None:
        return top, None
    rows, density = read_windowed(
        descending,
        {**query, key: {"$gte": floor, "$lt": above}},
        key,
        True,
        PROBE_ROWS,
        lambda: floor,
        None,
        value_of,
        growth=SEARCH_GROWTH,
    )
    if len(rows) < PROBE_ROWS:  # the whole feed: its oldest row is the lowest
        return (value_of(rows[-1]) if rows else top), density
    width = max(PROBE_ROWS / density if density else FIRST_WINDOW_SECONDS, 1.0)
    high = value_of(rows[-1])  # a row has this key
    low = floor  # no row is below it (unless a gap hid it)
    for _ in range(LOWEST_ROUNDS):
        while span(low, high) > width / PRECISION:
            middle = shifted(low, span(low, high) / 2)
            if middle is None or not low < middle < high:
                break
            edge = shifted(middle, width)
            found = ascending({**query, key: {"$gte": middle, "$lt": min(edge, high)}}, 1)
            if found:
                high = value_of(found[0])
            else:
                low = middle
        below, _ = read_windowed(
            descending,
            {**query, key: {"$gte": floor, "$lt": low}},
            key,
            True,
            1,
            lambda: floor,
            1.0 / width,
            value_of,
            growth=SEARCH_GROWTH,
        )
        if not below:
            return low, density
        # a probe fell in a gap: again below the row it hid, with probes
        # wide enough to span such gaps
        high, low = value_of(below[0]), floor
        width *= GAP_GROWTH
    return high, density  # the lowest key known to hold a row
