"""The database's clock, as a watermark page's bound needs it.

A watermark page shows no document younger than ``W`` by the database's
clock (``key <= now - W``). Sent as ``$expr`` with ``$$NOW``, that bound is
evaluated by the server, but a server's planner may then use no index for
the query whatever range of the key stands beside it (the embedded server
scans the whole collection for it). :class:`DatabaseClock` gives the bound
as a plain value instead: the server's ``localTime`` (``hello``), read at
most once per :data:`REFRESH_SECONDS` and carried forward by this process's
monotonic clock from the moment its answer arrived. The server's clock had
reached that time when it answered, so the value is never ahead of the
server's clock but by the two clocks' difference in rate over a second;
:data:`MARGIN_SECONDS` covers that many times over.
"""

from __future__ import annotations

import threading
import time
from datetime import datetime, timezone
from typing import Any

__all__ = ["MARGIN_SECONDS", "REFRESH_SECONDS", "DatabaseClock"]

#: Seconds between two reads of the server's time.
REFRESH_SECONDS = 1.0
#: Seconds taken off the time carried forward (clocks that run at rates a
#: ten-thousandth apart part by 0.1 ms in a second).
MARGIN_SECONDS = 0.001


class DatabaseClock:
    """The database server's time, a lower bound of it, for one client.

    One per store and process, shared by its threads.
    """

    def __init__(self, refresh_seconds: float = REFRESH_SECONDS) -> None:
        self.refresh_seconds = refresh_seconds
        self._lock = threading.Lock()
        #: the server's time read last (seconds since the epoch) and the
        #: monotonic time its answer arrived
        self._server: float | None = None
        self._arrived = 0.0
        #: False once the server answered without a ``localTime``
        self.available = True

    def now(self, client: Any) -> float | None:
        """The server's time in seconds since the epoch (never ahead of it);
        None when the server does not tell its time."""
        if not self.available:
            return None
        with self._lock:
            here = time.monotonic()
            if self._server is None or here - self._arrived >= self.refresh_seconds:
                answer = client.admin.command("hello")
                arrived = time.monotonic()
                local = answer.get("localTime")
                if not isinstance(local, datetime):
                    self.available = False
                    return None
                if local.tzinfo is None:
                    local = local.replace(tzinfo=timezone.utc)
                self._server, self._arrived, here = local.timestamp(), arrived, arrived
            return self._server + (here - self._arrived) - MARGIN_SECONDS
