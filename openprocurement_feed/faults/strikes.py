"""Did a cell's fault strike? The commands it failed, counted by the driver.

A fault armed on a command nobody sends, or on a client that never sends
it while the cell lasts, fails nothing: such a cell proves nothing and is
``missed``. The matrix therefore counts, with the driver's command
monitoring on the client the cell aims at, the commands that failed *by the
cell's fault*:

* an error code (an election, a time limit, a lost stream history): the
  failed commands with that code;
* a dropped connection: the commands failed by a closed connection
  (``AutoReconnect``);
* a write concern error: the commands whose reply (or error) carries a
  write concern error with the cell's code;
* a slow command: the commands that took at least the block time.

The clients log these through :class:`~..roles.CommandLog` when
:data:`~..roles.COMMAND_LOG_ENV` names a file (:func:`command_log` sets it
while the matrix runs), so a client in another process (a sequencer started
as its own process, a web worker) would be counted alike: the variable is
inherited, the file shared, each line names its client and process.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from ..roles import COMMAND_LOG_ENV
from .cells import BLOCK_MS, Cell

#: The driver's error type of a command whose connection was closed.
CLOSED = "AutoReconnect"


def struck_by(cell: Cell, record: dict[str, Any]) -> bool:
    """True when the logged command ``record`` failed by ``cell``'s fault
    (the client's name aside: :func:`strikes` checks it)."""
    if record.get("command") != cell.command:
        return False
    if cell.kind == "dropped":
        return bool(record.get("failed")) and record.get("errtype") == CLOSED
    if cell.kind == "write-concern":
        return record.get("wce") == cell.code or (bool(record.get("failed")) and record.get("code") == cell.code)
    if cell.kind == "slow":
        return float(record.get("ms", 0.0)) >= BLOCK_MS
    return bool(record.get("failed")) and record.get("code") == cell.code


def strikes(cell: Cell, app_name: str, records: Iterable[dict[str, Any]]) -> int:
    """How many of ``records`` are commands of the client ``app_name``
    that ``cell``'s fault failed."""
    return sum(1 for record in records if record.get("app") == app_name and struck_by(cell, record))


class CommandLogFile:
    """The file the clients' :class:`~..roles.CommandLog` write to, read
    from a mark on (:meth:`mark`, :meth:`since`)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def mark(self) -> int:
        """Where the file ends now."""
        try:
            return os.path.getsize(self.path)
        except OSError:
            return 0

    def since(self, mark: int) -> list[dict[str, Any]]:
        """The records written after ``mark`` (a line still being written
        is left out)."""
        try:
            with open(self.path, "rb") as handle:
                handle.seek(mark)
                data = handle.read()
        except OSError:
            return []
        records = []
        for line in data.split(b"\n"):
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict):
                records.append(record)
        return records


@contextmanager
def command_log() -> Iterator[CommandLogFile]:
    """Inside the block, every client :func:`~..roles.open_client` opens
    (in this process and in the processes it starts) logs to a fresh file;
    after it, the variable is as it was and the file is gone."""
    folder = tempfile.mkdtemp(prefix="openprocurement-feed-commands-")
    path = os.path.join(folder, "commands.jsonl")
    before = os.environ.get(COMMAND_LOG_ENV)
    os.environ[COMMAND_LOG_ENV] = path
    try:
        yield CommandLogFile(path)
    finally:
        if before is None:
            os.environ.pop(COMMAND_LOG_ENV, None)
        else:
            os.environ[COMMAND_LOG_ENV] = before
        shutil.rmtree(folder, ignore_errors=True)
