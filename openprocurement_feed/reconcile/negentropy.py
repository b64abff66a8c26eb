"""The Negentropy V1 protocol: the initiator's and the responder's steps.

One :class:`Negentropy` works over a :class:`~.storage.Storage`. The
initiator calls :meth:`Negentropy.initiate`, sends the message, and feeds
every answer to :meth:`Negentropy.reconcile_initiator`, which returns the
next message (``None`` when the sets are reconciled) and the ids found on
one side only. The responder answers each message with
:meth:`Negentropy.reconcile`; it keeps no state between messages.

The messages are byte for byte those of the reference implementations (the
same splits into 16 buckets, the same minimal bounds, the same frame size
handling), so either side talks to any of them.

The storage is asked only for its size, items by position (a range or one),
the position of a bound and the fingerprints of ranges: a storage that
keeps sums of its parts answers a round without reading the whole set.
A skip range costs no storage call at all.
"""

from __future__ import annotations

from .errors import FrameSizeError
from .items import ID_SIZE, MAX_TIMESTAMP, Bound, Item
from .storage import Storage
from .wire import MODE_FINGERPRINT, MODE_ID_LIST, MODE_SKIP, MessageWriter, Range, decode_message

__all__ = ["BUCKETS", "FRAME_MARGIN", "MIN_FRAME_SIZE_LIMIT", "Negentropy"]

#: A range of this many items or more is split into this many fingerprinted buckets;
#: a smaller one is sent as an id list.
BUCKETS = 16
#: The smallest frame size limit the specification allows (0 means no limit).
MIN_FRAME_SIZE_LIMIT = 4096
#: A message stops growing this many bytes below the limit (room for the closing fingerprint).
FRAME_MARGIN = 200
_INFINITY = Bound(MAX_TIMESTAMP)


class Negentropy:
    """One side of a reconciliation over ``storage``.

    ``frame_size_limit`` bounds the messages this side writes (0: no limit;
    otherwise at least 4096 bytes). As a responder it also refuses a message
    over it (:class:`~.errors.FrameSizeError`): the initiator is told the
    limit and writes within it. As an initiator it reads answers of any size
    (the responder may have a larger limit).
    """

    def __init__(self, storage: Storage, frame_size_limit: int = 0) -> None:
        if frame_size_limit < 0 or 0 < frame_size_limit < MIN_FRAME_SIZE_LIMIT:
            raise ValueError(
                f"frame size limit {frame_size_limit}: 0 (no limit) or at least {MIN_FRAME_SIZE_LIMIT} bytes"
            )
        self.storage = storage
        self.frame_size_limit = frame_size_limit
        self.is_initiator = False

    # -- the two roles -------------------------------------------------------

    def initiate(self) -> bytes:
        """The first message of the initiator (the whole set, split or listed)."""
        if self.is_initiator:
            raise RuntimeError("initiate() was already called on this Negentropy")
        self.is_initiator = True
        writer = MessageWriter()
        writer.data += self._split(0, self.storage.size(), _INFINITY, writer)
        return bytes(writer.data)

    def reconcile(self, query: bytes) -> bytes:
        """The responder's answer to ``query``.

        Raises :class:`~.errors.UnsupportedVersion` for a message of another
        protocol version (send its ``answer``), :class:`~.errors.FrameSizeError`
        for a message over the frame size limit, :class:`~.errors.ProtocolError`
        for a malformed one; in each case before the storage is asked anything.
        """
        if self.is_initiator:
            raise RuntimeError("the initiator reads answers with reconcile_initiator()")
        if self.frame_size_limit and len(query) > self.frame_size_limit:
            raise FrameSizeError(
                f"message of {len(query)} bytes over the frame size limit of {self.frame_size_limit} bytes"
            )
        return bytes(self._process(decode_message(query), None, None))

    def reconcile_initiator(self, query: bytes) -> tuple[bytes | None, list[bytes], list[bytes]]:
        """Read the responder's answer: ``(next message or None when done, have ids, need ids)``.

        *have* ids are on this side only, *need* ids on the responder's only
        (the ids found in this round; every round adds its own).
        """
        self.is_initiator = True
        have: list[bytes] = []
        need: list[bytes] = []
        output = self._process(decode_message(query), have, need)
        return (None if len(output) == 1 else bytes(output)), have, need

    # -- the common step -----------------------------------------------------

    def _exceeded(self, size: int) -> bool:
        return bool(self.frame_size_limit) and size > self.frame_size_limit - FRAME_MARGIN

    def _process(self, ranges: list[Range], have: list[bytes] | None, need: list[bytes] | None) -> bytearray:
        """Answer the ranges of a decoded message; ``have``/``need`` given for the initiator."""
        storage = self.storage
        writer = MessageWriter()
        output = writer.data
        size = storage.size() if ranges else 0
        previous_bound = Bound(0)
        previous_index = 0
        # Skip ranges are resolved to positions lazily: a run of them costs one lookup.
        pending_skip_bound: Bound | None = None
        skip = False
        for rng in ranges:
            bound = rng.bound
            if rng.mode == MODE_SKIP:
                skip = True
                pending_skip_bound = bound
                previous_bound = bound
                continue
            if pending_skip_bound is not None:
                previous_index = storage.find_lower_bound(previous_index, size, pending_skip_bound)
                pending_skip_bound = None
            lower = previous_index
            # No item lies at infinity: the last range ends at the end without a lookup.
            upper = size if bound.is_infinity else storage.find_lower_bound(lower, size, bound)
            part = b""
            if rng.mode == MODE_FINGERPRINT:
                if rng.fingerprint != storage.fingerprint(lower, upper):
                    if skip:
                        skip = False
                        part = writer.skip(previous_bound)
                    part += self._split(lower, upper, bound, writer)
                else:
                    skip = True
            else:
                assert rng.mode == MODE_ID_LIST
                if have is not None and need is not None:
                    skip = True
                    self._compare_ids(rng.ids, lower, upper, have, need)
                else:
                    opening = b""
                    if skip:
                        skip = False
                        opening = writer.skip(previous_bound)
                    upper = self._answer_ids(lower, upper, bound, writer, opening)
            if self._exceeded(len(output) + len(part)):
                # Over the limit: stop here; one fingerprint covers the rest of the space.
                output += writer.fingerprint(_INFINITY, storage.fingerprint(upper, size))
                break
            output += part
            previous_index = upper
            previous_bound = bound
        return output

    def _compare_ids(
        self, ids: tuple[bytes, ...], lower: int, upper: int, have: list[bytes], need: list[bytes]
    ) -> None:
        """The initiator's reading of an id list: ours not in it are *have*, its not in ours *need*."""
        theirs = dict.fromkeys(ids)
        for item in self.storage.iterate(lower, upper):
            if item.id in theirs:
                del theirs[item.id]
            else:
                have.append(item.id)
        need.extend(theirs)

    def _answer_ids(self, lower: int, upper: int, bound: Bound, writer: MessageWriter, opening: bytes) -> int:
        """The responder's answer to an id list: its own ids, as many as the frame allows.

        ``opening`` (a pending skip range) goes before it; like the reference, the
        frame size is counted without it. Returns where the listed ids end
        (``upper``, or earlier when cut by the frame size limit).
        """
        output = writer.data
        ids = bytearray()
        count = 0
        end_bound = bound
        for index, item in enumerate(self.storage.iterate(lower, upper), lower):
            if self._exceeded(len(output) + len(ids)):
                end_bound = Bound.of_item(item)
                upper = index
                break
            ids += item.id
            count += 1
        output += opening
        output += writer.id_list(end_bound, bytes(ids), count)
        return upper

    def _split(self, lower: int, upper: int, upper_bound: Bound, writer: MessageWriter) -> bytes:
        """The ranges that describe positions ``lower`` .. ``upper`` (up to ``upper_bound``)."""
        storage = self.storage
        count = upper - lower
        if count < BUCKETS * 2:
            ids = b"".join(item.id for item in storage.iterate(lower, upper))
            return writer.id_list(upper_bound, ids, count)
        per_bucket, with_extra = divmod(count, BUCKETS)
        parts = []
        current = lower
        for i in range(BUCKETS):
            bucket_size = per_bucket + (1 if i < with_extra else 0)
            fingerprint = storage.fingerprint(current, current + bucket_size)
            current += bucket_size
            if current == upper:
                next_bound = upper_bound
            else:
                before, after = storage.iterate(current - 1, current + 1)
                next_bound = minimal_bound(before, after)
            parts.append(writer.fingerprint(next_bound, fingerprint))
        return b"".join(parts)


def minimal_bound(before: Item, after: Item) -> Bound:
    """The shortest bound above ``before`` and not above ``after`` (two neighbours, ``before < after``)."""
    if after.timestamp != before.timestamp:
        return Bound(after.timestamp)
    # The first byte where the ids differ (two items of a set never share a timestamp and an id).
    shared = next((i for i, (a, b) in enumerate(zip(before.id, after.id, strict=True)) if a != b), ID_SIZE - 1)
    return Bound(after.timestamp, after.id[: shared + 1])
