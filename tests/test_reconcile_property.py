"""Two random sets reconcile to exactly their symmetric difference, with and without frame limits."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from openprocurement_feed.reconcile import Item, Negentropy, VectorStorage


def reconcile(
    ours: list[Item], theirs: list[Item], limit: int = 0, peer_limit: int = 0
) -> tuple[list[bytes], list[bytes], int, list[bytes]]:
    """Run a whole reconciliation in memory: (have, need, rounds, every message both ways)."""
    initiator = Negentropy(VectorStorage.of(ours), limit)
    responder = Negentropy(VectorStorage.of(theirs), peer_limit)
    have: list[bytes] = []
    need: list[bytes] = []
    messages: list[bytes] = []
    message: bytes | None = initiator.initiate()
    rounds = 0
    while message is not None:
        assert rounds < 10_000
        messages.append(message)
        answer = responder.reconcile(message)
        messages.append(answer)
        message, new_have, new_need = initiator.reconcile_initiator(answer)
        have += new_have
        need += new_need
        rounds += 1
    return have, need, rounds, messages


# Ids from a small alphabet share long prefixes; timestamps from a narrow range collide.
_ids = st.one_of(
    st.binary(min_size=32, max_size=32),
    st.tuples(st.integers(0, 3), st.integers(0, 255)).map(lambda p: bytes([p[0]]) * 31 + bytes([p[1]])),
)
_entries = st.lists(
    st.tuples(st.integers(0, 40), _ids, st.sampled_from(["both", "both", "both", "ours", "theirs"])),
    max_size=400,
    unique_by=lambda e: e[1],
)


@settings(max_examples=60, deadline=None)
@given(_entries, st.sampled_from([(0, 0), (4096, 4096), (4096, 0), (0, 4096), (4096, 8192)]))
def test_two_sets_reconcile_to_their_symmetric_difference(
    entries: list[tuple[int, bytes, str]], limits: tuple[int, int]
) -> None:
    ours = [Item(t, id) for t, id, side in entries if side != "theirs"]
    theirs = [Item(t, id) for t, id, side in entries if side != "ours"]
    have, need, _, messages = reconcile(ours, theirs, *limits)
    assert set(have) == {i.id for i in ours} - {i.id for i in theirs}
    assert set(need) == {i.id for i in theirs} - {i.id for i in ours}
    if limits == (0, 0):
        assert len(have) == len(set(have)) and len(need) == len(set(need))
    for index, message in enumerate(messages):
        limit = limits[index % 2]
        assert not limit or len(message) <= limit


@settings(max_examples=10, deadline=None)
@given(
    st.integers(0, 2**32),
    st.integers(200, 2000),
    st.floats(0, 0.2),
    st.sampled_from([0, 4096, 10_000]),
    st.sampled_from([1, 1000, 2**40]),
)
def test_large_sets_within_the_frame_size_limit(seed: int, size: int, differ: float, limit: int, spread: int) -> None:
    """Thousands of items, up to a fifth of them on one side only: every message stays within the limit."""
    rng = random.Random(seed)
    base = rng.randrange(2**62)
    ours: list[Item] = []
    theirs: list[Item] = []
    for _ in range(size):
        item = Item(base + rng.randrange(spread), rng.randbytes(32))
        roll = rng.random()
        if roll >= differ:
            ours.append(item)
            theirs.append(item)
        elif roll < differ / 2:
            ours.append(item)
        else:
            theirs.append(item)
    have, need, rounds, messages = reconcile(ours, theirs, limit, limit)
    assert set(have) == {i.id for i in ours} - {i.id for i in theirs}
    assert set(need) == {i.id for i in theirs} - {i.id for i in ours}
    assert not limit or max(len(m) for m in messages) <= limit
    if not have and not need:
        assert rounds == 1


def test_equal_sets_take_one_round_of_small_messages() -> None:
    rng = random.Random(3)
    items = [Item(rng.randrange(2**63), rng.randbytes(32)) for _ in range(5000)]
    have, need, rounds, messages = reconcile(items, list(reversed(items)))
    assert (have, need, rounds) == ([], [], 1)
    assert messages[1] == b"\x61"
    assert len(messages[0]) < 16 * (16 + 12)
