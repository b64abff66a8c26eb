"""The cells of the fault matrix: which fault, aimed at which client, how long.

A cell names a fault *kind*, the server's error code (if any), the commands
it fails, the role whose client it is aimed at (by ``appName``) and whether
it is transient (``times: N``: the next N such commands fail) or sustained
(``alwaysOn`` for the cell's hold time). :meth:`Cell.fail_point` is the
``configureFailPoint`` command that arms it.

The labels are those a real server adds: ``RetryableWriteError`` on a write
outside a transaction and on ``commitTransaction``,
``TransientTransactionError`` on a statement inside a transaction (the demo
writes its objects in transactions: ``insert`` and ``update`` of the web
client), ``ResumableChangeStreamError`` on a change stream's reads.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

#: The roles a fault is aimed at; their clients' ``appName`` is in :mod:`..roles`.
WEB, SEQUENCER, LONGPOLL = "web", "sequencer", "longpoll"
#: The state-change errors of an election, in the order the cells use them.
ELECTION_CODES = (10107, 11602, 189, 91)
#: ``code`` → ``codeName`` of every error a cell returns.
CODE_NAMES = {
    10107: "NotWritablePrimary",
    11602: "InterruptedDueToReplStateChange",
    189: "PrimarySteppedDown",
    91: "ShutdownInProgress",
    64: "WriteConcernFailed",
    100: "UnsatisfiableWriteConcern",
    50: "MaxTimeMSExpired",
    280: "ChangeStreamFatalError",
    286: "ChangeStreamHistoryLost",
}
#: The commands each role sends that a fault is tried on.
COMMANDS = {
    WEB: ("find", "insert", "update", "findAndModify", "commitTransaction"),
    SEQUENCER: ("aggregate", "getMore", "update"),
    LONGPOLL: ("aggregate", "getMore"),
}
#: Commands the web client sends inside the demo's transactions.
IN_TRANSACTION = frozenset({"insert", "update"})
#: The writes of each role a write concern error is tried on.
WRITES = {WEB: ("insert", "update", "findAndModify", "commitTransaction"), SEQUENCER: ("update",)}
#: How many commands a transient cell fails.
TRANSIENT_TIMES = 3
#: How long a slow command is held (ms): longer than the watermark the
#: matrix runs with, so a delayed commit lands behind what crawlers read.
BLOCK_MS = 3000
#: The kinds, in the order the table shows them.
KINDS = ("election", "dropped", "write-concern", "max-time", "history-lost", "slow")


@dataclass(frozen=True)
class Cell:
    """One fault of the matrix.

    :param kind: one of :data:`KINDS`.
    :param role: the client aimed at (:data:`WEB`, :data:`SEQUENCER`,
        :data:`LONGPOLL`).
    :param command: the command failed.
    :param code: the error code (the write concern error's for
        ``write-concern``), None for a dropped connection or a slow command.
    :param sustained: ``alwaysOn`` for the hold time, else ``times: N``.
    """

    kind: str
    role: str
    command: str
    code: int | None = None
    sustained: bool = False

    @property
    def name(self) -> str:
        """How the cell is named in the table and in ``--only``."""
        what = self.kind if self.code is None else f"{self.kind} {self.code}"
        return f"{what} {self.role}:{self.command} {'always' if self.sustained else f'x{TRANSIENT_TIMES}'}"

    @property
    def delayed_commit(self) -> bool:
        """The commit held past the watermark: the seed's election caveat,
        a loss the watermark order is expected to show."""
        return self.kind == "slow" and self.command == "commitTransaction"

    def labels(self) -> list[str]:
        """The error labels a real server adds to this cell's error."""
        if self.kind != "election":
            return []
        if self.role != WEB and self.command in ("aggregate", "getMore"):
            return ["ResumableChangeStreamError"]
        if self.role == WEB and self.command in IN_TRANSACTION:
            return ["TransientTransactionError"]
        if self.command in ("insert", "update", "findAndModify", "commitTransaction"):
            return ["RetryableWriteError"]
        return []

    def fail_point(self, app_name: str) -> dict[str, Any]:
        """The ``configureFailPoint`` command (without its name) that arms
        the cell for the client named ``app_name``."""
        data: dict[str, Any] = {"failCommands": [self.command], "appName": app_name}
        if self.kind in ("election", "max-time", "history-lost"):
            data["errorCode"] = self.code
            if self.labels():
                data["errorLabels"] = self.labels()
        elif self.kind == "dropped":
            data["closeConnection"] = True
        elif self.kind == "write-concern":
            error: dict[str, Any] = {"code": self.code, "codeName": CODE_NAMES[self.code or 0]}
            if self.code == 64:
                error.update(errmsg="waiting for replication timed out", errInfo={"wtimeout": True})
            else:
                error["errmsg"] = "Not enough data-bearing nodes"
            data["writeConcernError"] = error
        elif self.kind == "slow":
            data.update(blockConnection=True, blockTimeMS=BLOCK_MS)
        else:  # pragma: no cover - KINDS is closed
            raise ValueError(f"unknown fault kind {self.kind!r}")
        mode: Any = "alwaysOn" if self.sustained else {"times": TRANSIENT_TIMES}
        return {"mode": mode, "data": data}


def _both(kind: str, role: str, command: str, transient: int | None, sustained: int | None) -> list[Cell]:
    return [Cell(kind, role, command, transient), Cell(kind, role, command, sustained, sustained=True)]


def full_matrix() -> list[Cell]:
    """Every cell, in the order they run (the delayed commits last: they
    leave the watermark verdict ``violated`` for the lag window).

    The election codes take turns over the commands (each code is tried on
    several commands and in both forms; every command meets two codes).
    """
    cells: list[Cell] = []
    turn = 0
    for role, commands in COMMANDS.items():
        for command in commands:
            first, second = ELECTION_CODES[turn % 4], ELECTION_CODES[(turn + 1) % 4]
            cells += _both("election", role, command, first, second)
            turn += 1
    for role, commands in COMMANDS.items():
        for command in commands:
            cells += _both("dropped", role, command, None, None)
    for role, commands in WRITES.items():
        for command in commands:
            cells += _both("write-concern", role, command, 64, 100)
    cells += _both("max-time", WEB, "find", 50, 50)
    cells += _both("history-lost", SEQUENCER, "getMore", 280, 286)
    cells += _both("slow", WEB, "find", None, None)
    cells += _both("slow", SEQUENCER, "getMore", None, None)
    cells += _both("slow", WEB, "commitTransaction", None, None)
    return cells


def fast_matrix() -> list[Cell]:
    """Each kind once, on its most exposed target: the web client's
    commit for errors and dropped connections (a write whose outcome is
    unknown), the sequencer's stream, the feed's reads, the delayed commit."""
    return [
        Cell("election", WEB, "commitTransaction", 10107),
        Cell("election", SEQUENCER, "getMore", 11602, sustained=True),
        Cell("dropped", WEB, "commitTransaction"),
        Cell("write-concern", WEB, "commitTransaction", 64),
        Cell("write-concern", SEQUENCER, "update", 64),
        Cell("max-time", WEB, "find", 50, sustained=True),
        Cell("history-lost", SEQUENCER, "getMore", 286),
        Cell("slow", WEB, "commitTransaction"),
    ]


def select(cells: Iterable[Cell], only: Sequence[str]) -> list[Cell]:
    """The cells whose name contains every word of one of ``only``'s
    filters (all cells without a filter): ``--only "election web"``."""
    chosen = list(cells)
    if not only:
        return chosen
    filters = [text.lower().split() for text in only]
    return [cell for cell in chosen if any(all(word in cell.name.lower() for word in words) for words in filters)]
