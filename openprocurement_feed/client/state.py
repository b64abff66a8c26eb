"""The sync position and the state file that keeps it across restarts.

The file is JSON, rewritten after every handled page through a temporary file
in the same directory, ``fsync`` and ``os.replace``: a crash leaves either the
old or the new file, never a torn one.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from .errors import StateError, StateMismatch

#: The ``format`` marker of a state file.
STATE_FORMAT = "openprocurement-feed-sync-state"
#: The version of the state file layout this client writes and reads.
STATE_VERSION = 1


@dataclass(frozen=True)
class FeedIdentity:
    """What a cursor is valid for: the feed URL (without the parameters the
    client manages) and the parameters that change which items the feed
    holds or shows. ``limit`` is not part of it: offsets do not depend on it."""

    url: str
    mode: str = ""
    opt_fields: tuple[str, ...] = ()

    def describe(self) -> str:
        """A one-line description for error messages."""
        extra = []
        if self.mode:
            extra.append(f"mode={self.mode}")
        if self.opt_fields:
            extra.append("opt_fields=" + ",".join(self.opt_fields))
        return self.url + (f" ({', '.join(extra)})" if extra else "")


@dataclass
class SyncState:
    """Where the crawl stands.

    ``forward_offset`` is None until the first (newest) page was handled; an
    empty string then means "from the beginning" (the feed was empty).
    ``backward_offset`` is the ``next_page`` offset of the last backward page
    handled; ``backward_done`` turns true on the first empty backward page.
    """

    feed: FeedIdentity
    forward_offset: str | None = None
    backward_offset: str | None = None
    backward_done: bool = False
    items_handled: int = 0
    pages_handled: int = 0
    restarts: int = 0
    updated: str = field(default="")

    @property
    def started(self) -> bool:
        """True once the first page was handled."""
        return self.forward_offset is not None

    def reset(self) -> None:
        """Forget both cursors (after the server rejected an offset)."""
        self.forward_offset = None
        self.backward_offset = None
        self.backward_done = False

    def to_json(self) -> dict[str, Any]:
        """The state as the JSON object written to the file."""
        data = asdict(self)
        feed = data.pop("feed")
        return {
            "format": STATE_FORMAT,
            "version": STATE_VERSION,
            "feed": {"url": feed["url"], "mode": feed["mode"], "opt_fields": list(feed["opt_fields"])},
            **data,
        }

    @classmethod
    def from_json(cls, data: Any, where: str = "state") -> SyncState:
        """Read a state written by :meth:`to_json`; :class:`StateError` if it
        is not one."""
        if not isinstance(data, dict) or data.get("format") != STATE_FORMAT:
            raise StateError(f'{where} is not a sync state file (no "format": {STATE_FORMAT!r})')
        if data.get("version") != STATE_VERSION:
            raise StateError(f"{where} has version {data.get('version')!r}; this client reads version {STATE_VERSION}")
        try:
            feed = data["feed"]
            identity = FeedIdentity(
                url=_text(feed["url"]),
                mode=_text(feed.get("mode", "")),
                opt_fields=tuple(_text(name) for name in feed.get("opt_fields", [])),
            )
            state = cls(
                feed=identity,
                forward_offset=_optional_text(data.get("forward_offset")),
                backward_offset=_optional_text(data.get("backward_offset")),
                backward_done=bool(data.get("backward_done", False)),
                items_handled=int(data.get("items_handled", 0)),
                pages_handled=int(data.get("pages_handled", 0)),
                restarts=int(data.get("restarts", 0)),
                updated=_text(data.get("updated", "")),
            )
        except (KeyError, TypeError, ValueError) as error:
            raise StateError(f"{where} is damaged: {error!r}") from None
        return state


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {value!r}")
    return value


def _optional_text(value: Any) -> str | None:
    return None if value is None else _text(value)


@runtime_checkable
class StateKeeper(Protocol):
    """Where a :class:`SyncState` is kept: :class:`StateFile`, or a store
    that commits a page's items and the position after it together (the
    mirror's database)."""

    def load(self, feed: FeedIdentity) -> SyncState:
        """The saved state for ``feed``, or a fresh one."""

    def save(self, state: SyncState) -> None:
        """Keep ``state`` durably (called after every handled page)."""


class StateFile:
    """A :class:`SyncState` kept in the JSON file at ``path``."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def load(self, feed: FeedIdentity) -> SyncState:
        """The saved state for ``feed``, or a fresh one if the file does not
        exist.

        :raises StateMismatch: the file belongs to another feed.
        :raises StateError: the file cannot be read or is not a state file.
        """
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return SyncState(feed=feed)
        except OSError as error:
            raise StateError(f"cannot read the state file {self.path}: {error.strerror or error}") from None
        try:
            data = json.loads(text)
        except ValueError as error:
            raise StateError(f"the state file {self.path} is not valid JSON: {error}") from None
        state = SyncState.from_json(data, where=f"the state file {self.path}")
        if state.feed != feed:
            raise StateMismatch(
                f"the state file {self.path} belongs to another feed: {state.feed.describe()}, "
                f"not {feed.describe()}; use another state file or delete it to start over"
            )
        return state

    def save(self, state: SyncState) -> None:
        """Write ``state`` atomically: temporary file in the same directory,
        ``fsync``, ``os.replace``, then ``fsync`` of the directory."""
        state.updated = datetime.now(timezone.utc).isoformat(timespec="milliseconds")
        directory = self.path.parent
        text = json.dumps(state.to_json(), indent=2, sort_keys=True) + "\n"
        try:
            handle, temporary = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=directory)
        except OSError as error:
            raise StateError(f"cannot write the state file {self.path}: {error.strerror or error}") from None
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as stream:
                stream.write(text)
                stream.flush()
                os.fsync(stream.fileno())
            os.replace(temporary, self.path)
        except BaseException as error:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            if isinstance(error, OSError):
                raise StateError(f"cannot write the state file {self.path}: {error.strerror or error}") from None
            raise
        _fsync_directory(directory)


def _fsync_directory(directory: Path) -> None:
    """Make the rename durable (a no-op where directories cannot be opened)."""
    try:
        descriptor = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:  # pragma: no cover - file systems that cannot sync a directory
        pass
    finally:
        os.close(descriptor)
