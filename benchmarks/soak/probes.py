"""What the soak reads from outside the processes it runs: each process's
memory and open files (``/proc``), the database's connections and
collections (``serverStatus``, ``collStats``), the web workers' requests
(gunicorn's access log) and what the crawlers wrote (their ``--out`` files).

Everything here only reads; nothing is kept that the processes could see.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: gunicorn's access log line for the soak: status, duration (ms), method,
#: path and query (``--access-logformat``).
ACCESS_LOG_FORMAT = "%(s)s %(M)s %(m)s %(U)s ?%(q)s"
#: The oplog, as the figures name it.
OPLOG = "local.oplog.rs"
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


# -- processes ----------------------------------------------------------------


def children(pid: int) -> list[int]:
    """The direct children of ``pid`` (Linux), [] when it is gone."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children", encoding="ascii") as handle:
            return sorted(int(child) for child in handle.read().split())
    except OSError:
        return []


def descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid``, parents before their children."""
    found: list[int] = []
    pending = children(pid)
    while pending:
        current = pending.pop(0)
        found.append(current)
        pending.extend(children(current))
    return found


def rss_bytes(pid: int) -> int | None:
    """The resident set size of ``pid`` (``/proc/PID/statm``), None when gone."""
    try:
        with open(f"/proc/{pid}/statm", encoding="ascii") as handle:
            return int(handle.read().split()[1]) * PAGE_SIZE
    except (OSError, ValueError, IndexError):
        return None


def open_fds(pid: int) -> int | None:
    """The open file descriptors of ``pid`` (``/proc/PID/fd``), None when gone."""
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


@dataclass(frozen=True)
class ProcessFigures:
    """One process at one moment."""

    pid: int
    rss_mb: float
    fds: int


def read_process(pid: int) -> ProcessFigures | None:
    """``pid``'s RSS (MB) and open descriptors, None when it is gone."""
    rss, fds = rss_bytes(pid), open_fds(pid)
    if rss is None or fds is None:
        return None
    return ProcessFigures(pid, round(rss / 2**20, 1), fds)


# -- the database -------------------------------------------------------------


@dataclass
class DatabaseFigures:
    """The database at one moment: its connections and, per collection
    (``db.name``; the oplog is ``local.oplog.rs``), documents and bytes."""

    connections: int | None = None
    collections: dict[str, tuple[int, int]] = field(default_factory=dict)


def read_database(client: Any, db_name: str) -> DatabaseFigures:
    """``serverStatus``'s current connections, ``collStats`` of every
    collection of ``db_name`` and the oplog's entries; a figure the server
    does not give is left out."""
    from pymongo.errors import PyMongoError

    figures = DatabaseFigures()
    with contextlib.suppress(PyMongoError, KeyError, TypeError, ValueError):
        figures.connections = int(client.admin.command("serverStatus")["connections"]["current"])
    for name in _collection_names(client, db_name):
        try:
            stats = client[db_name].command("collStats", name)
            figures.collections[f"{db_name}.{name}"] = (int(stats["count"]), int(stats["size"]))
        except (PyMongoError, KeyError, TypeError, ValueError):
            continue
    # the embedded server's oplog answers $collStats with its entries only
    # (no bytes): its size is bounded by its entries
    with contextlib.suppress(PyMongoError, KeyError, TypeError, ValueError, IndexError):
        stats = next(client.local["oplog.rs"].aggregate([{"$collStats": {"storageStats": {}}}]))["storageStats"]
        figures.collections[OPLOG] = (int(stats["count"]), int(stats.get("size") or 0))
    return figures


def _collection_names(client: Any, db_name: str) -> list[str]:
    from pymongo.errors import PyMongoError

    try:
        return sorted(client[db_name].list_collection_names())
    except PyMongoError:
        return []


def published_lag(client: Any, db_name: str, collection: str) -> dict[str, Any]:
    """The lag window a follower published for ``collection`` (the
    ``feed_health`` document: ``p50``, ``p99``, ``max`` in ms)."""
    from pymongo.errors import PyMongoError

    from openprocurement_feed.commit.lag import HEALTH_COLLECTION

    try:
        document = client[db_name][HEALTH_COLLECTION].find_one({"_id": collection}) or {}
    except PyMongoError:
        return {}
    return dict(document.get("lag_ms") or {})


# -- files that grow ----------------------------------------------------------


class FileFollower(threading.Thread):
    """Reads a growing text file line by line and hands every complete line
    to :meth:`line` (in this thread), from its start, until stopped."""

    def __init__(self, path: Path, every: float = 0.1) -> None:
        super().__init__(name=f"follow-{path.name}", daemon=True)
        self.path = path
        self.every = every
        self.stopping = threading.Event()
        self.lock = threading.Lock()

    def line(self, text: str, now: float) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def lines(self) -> Iterator[tuple[str, float]]:
        while not self.path.exists():
            if self.stopping.wait(self.every):
                return
        with open(self.path, encoding="utf-8", errors="replace") as stream:
            pending = ""
            while True:
                chunk = stream.read(1 << 20)
                if chunk:
                    pending += chunk
                    parts = pending.split("\n")
                    pending = parts.pop()
                    now = time.time()
                    for part in parts:
                        if part.strip():
                            yield part, now
                elif self.stopping.wait(self.every):
                    return

    def run(self) -> None:
        for text, now in self.lines():
            with self.lock:
                self.line(text, now)


class CrawlerOutput(FileFollower):
    """A crawler's ``--out`` file: when each version ``(id, dateModified)``
    first appeared in it (``time.time()``)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, every=0.05)
        self.seen: dict[tuple[str, str], float] = {}

    def line(self, text: str, now: float) -> None:
        item = json.loads(text)
        self.seen.setdefault((item["id"], item["dateModified"]), now)

    def when(self, version: tuple[str, str]) -> float | None:
        with self.lock:
            return self.seen.get(version)

    def has_all(self, finals: dict[str, str]) -> bool:
        with self.lock:
            return all((key, value) in self.seen for key, value in finals.items())

    def missing(self, finals: dict[str, str]) -> list[str]:
        with self.lock:
            return sorted(key for key, value in finals.items() if (key, value) not in self.seen)


@dataclass
class RequestTally:
    """The web workers' answers since the last :meth:`AccessLog.take`:
    durations (s) of the requests that are not long polls, long polls
    counted apart, and every status of 500 and above."""

    durations: list[float] = field(default_factory=list)
    longpolls: int = 0
    errors: dict[int, int] = field(default_factory=dict)

    @property
    def requests(self) -> int:
        return len(self.durations) + self.longpolls


class AccessLog(FileFollower):
    """gunicorn's access log in :data:`ACCESS_LOG_FORMAT`: each interval's
    :class:`RequestTally`, and the 5xx answers of the whole run."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, every=0.5)
        self.current = RequestTally()
        self.errors_total: dict[int, int] = {}
        self.unparsed = 0

    def line(self, text: str, now: float) -> None:
        parts = text.split(" ", 4)
        try:
            status, millis = int(parts[0]), float(parts[1])
        except (ValueError, IndexError):
            self.unparsed += 1  # gunicorn's own lines, if any
            return
        if status >= 500:
            self.current.errors[status] = self.current.errors.get(status, 0) + 1
            self.errors_total[status] = self.errors_total.get(status, 0) + 1
        if "feed=longpoll" in text:
            self.current.longpolls += 1
        else:
            self.current.durations.append(millis / 1000.0)

    def take(self) -> RequestTally:
        """The tally since the last call; a new one starts."""
        with self.lock:
            tally, self.current = self.current, RequestTally()
            return tally


class HealthWatch(threading.Thread):
    """Reads the health view every ``every`` seconds: how many readings of
    each feed's verdict since the last :meth:`take`, and over the run."""

    def __init__(self, url: str, every: float = 5.0) -> None:
        super().__init__(name="health-watch", daemon=True)
        self.url = url
        self.every = every
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.current: dict[str, int] = {}
        self.total: dict[str, int] = {}

    def note(self, verdict: str) -> None:
        with self.lock:
            self.current[verdict] = self.current.get(verdict, 0) + 1
            self.total[verdict] = self.total.get(verdict, 0) + 1

    def run(self) -> None:
        import requests
        from requests.adapters import HTTPAdapter
        from urllib3.util.retry import Retry

        with requests.Session() as http:
            # a kept-alive connection the server closes as the next GET goes
            # out (gthread's keepalive is 2 s, the probe's interval longer)
            # is a dropped connection before any answer: sent again once,
            # as any HTTP client does for a GET; a verdict is never retried
            retry = Retry(total=1, connect=1, read=1, status=0, allowed_methods={"GET"}, raise_on_status=False)
            http.mount("http://", HTTPAdapter(max_retries=retry))
            while not self.stopping.wait(self.every):
                try:
                    report = http.get(self.url, timeout=10).json()
                    for item in report["feeds"]:
                        self.note(f"{item['name']}={item['verdict']}")
                except (requests.RequestException, ValueError, KeyError, TypeError) as error:
                    self.note(f"unreadable ({type(error).__name__})")

    def take(self) -> dict[str, int]:
        """The readings since the last call, by ``feed=verdict``."""
        with self.lock:
            taken, self.current = self.current, {}
            return taken
