"""The exceptions the sync client raises, one per thing a caller can act on."""

from __future__ import annotations


class SyncError(Exception):
    """Base class of every error of the sync client."""


class FeedError(SyncError):
    """The feed answered something the client cannot follow: a client error
    (400, 401, 403, 404 without an offset...), a body that is not a feed
    page, or offsets rejected again and again."""


class OffsetRejected(FeedError):
    """The server answered 404 for a request that carried an offset: by the
    protocol the crawler starts over from the newest page."""

    def __init__(self, offset: str, description: str = "") -> None:
        message = f"the server rejected the offset {offset!r}"
        if description:
            message += f": {description}"
        super().__init__(message)
        self.offset = offset


class FeedUnavailable(SyncError):
    """The feed kept failing (429, 5xx, connection errors) until the retry
    policy gave up; ``attempts`` and ``elapsed`` say for how long it tried."""

    def __init__(self, url: str, attempts: int, elapsed: float, last_error: str) -> None:
        super().__init__(f"gave up on {url} after {attempts} attempt(s) over {elapsed:.1f} s; last error: {last_error}")
        self.url = url
        self.attempts = attempts
        self.elapsed = elapsed
        self.last_error = last_error


class StateError(SyncError):
    """The state file cannot be read or written (corrupt, wrong format,
    permissions)."""


class StateMismatch(StateError):
    """The state file belongs to another feed (URL, ``mode`` or
    ``opt_fields`` differ): its cursors mean nothing for this one."""


class SyncStopped(SyncError):
    """Raised inside the client when :meth:`FeedSync.stop` interrupts a wait;
    :meth:`FeedSync.run` catches it and returns normally."""
