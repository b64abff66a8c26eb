"""What the commit follower raises, and the server's error codes it reads
(shared by the sequencer and the database stream)."""

from __future__ import annotations

#: Server error codes of a resume point that is no longer in the oplog.
HISTORY_LOST_CODES = frozenset({136, 280, 286})


class SequencerError(RuntimeError):
    """The sequencer cannot follow a collection (a setup problem, not transient)."""
