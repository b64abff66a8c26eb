"""How long a client keeps trying a request: the :class:`RetryPolicy`, the
:class:`RetryEvent` of each retried attempt, the :class:`TransientError` of a
failure worth retrying, and a ``Retry-After`` header read."""

from __future__ import annotations

import email.utils
import time
from dataclasses import dataclass
from datetime import timezone


@dataclass(frozen=True)
class RetryPolicy:
    """How long to keep trying one page.

    :param initial_backoff: the first backoff in seconds (also the shortest
        wait, even when a server asks for ``Retry-After: 0``).
    :param max_backoff: the longest exponential backoff (a random jitter of up
        to ``initial_backoff`` is added to every backoff).
    :param max_attempts: give up after this many attempts (None: no limit).
    :param max_time: give up when the next wait would end later than this
        many seconds after the first attempt (None: no limit).
    :param max_retry_after: the longest ``Retry-After`` obeyed as sent.
    """

    initial_backoff: float = 0.5
    max_backoff: float = 30.0
    max_attempts: int | None = None
    max_time: float | None = 300.0
    max_retry_after: float = 300.0


@dataclass(frozen=True)
class RetryEvent:
    """A failed attempt about to be retried after ``wait`` seconds."""

    url: str
    attempt: int
    wait: float
    reason: str


class TransientError(Exception):
    """A failure worth retrying; ``retry_after`` is what the server asked for."""

    def __init__(self, reason: str, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header: delta-seconds or an
    HTTP date; None when absent or unreadable, never negative."""
    if value is None:
        return None
    text = value.strip()
    if not text:
        return None
    if text.isdigit():
        return float(text)
    try:
        moment = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    current = time.time() if now is None else now
    return max(0.0, moment.timestamp() - current)
