"""What the commit follower raises, and the server's error codes it reads
(shared by the sequencer and the database stream)."""

from __future__ import annotations

#: Server error codes of a resume point that is no longer in the oplog.
HISTORY_LOST_CODES = frozenset({136, 280, 286})
#: Codes of a resume point a server refuses, where another point may do:
#: 13 (Unauthorized: the embedded server refuses a post-batch token that
#: names a command of the database) and 260 (InvalidResumeToken).
REFUSED_POINT_CODES = frozenset({13, 260})


class SequencerError(RuntimeError):
    """The sequencer cannot follow a collection (a setup problem, not transient)."""
