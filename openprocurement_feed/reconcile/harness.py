"""The conformance harness: the line protocol of the reference's test harnesses.

``python -m openprocurement_feed.reconcile.harness`` reads commands on its
standard input, one a line, and writes its answers on its standard output,
so that the reference's fuzzer (``test/fuzz.pl`` of hoytech/negentropy) and
other drivers run it against any other implementation:

``item,<timestamp>,<id hex>``
    add an item (before ``seal``);
``seal``
    sort the items; the frame size limit comes from ``FRAMESIZELIMIT`` in
    the environment (bytes, 0 or unset: no limit);
``initiate``
    become the initiator: writes ``msg,<hex>``, the first message;
``msg,<hex>``
    a message from the other side. The responder writes ``msg,<hex>``, its
    answer (``msg,61`` for a message of another protocol version). The
    initiator writes ``have,<id hex>`` and ``need,<id hex>`` lines (ids
    only it has, ids only the other side has), then ``msg,<hex>``, its next
    message, or ``done`` when the sets are reconciled.

A line it cannot read (an unknown command, a bad number or hex, a command
out of order) stops it with a message on standard error naming the line and
exit status 2; a malformed message from the other side stops it with the
protocol error and exit status 1. End of input ends it with status 0.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping
from typing import TextIO

from .errors import ProtocolError, UnsupportedVersion
from .items import Item
from .negentropy import MIN_FRAME_SIZE_LIMIT, Negentropy
from .storage import VectorStorage

__all__ = ["HarnessError", "frame_size_limit", "main", "run"]

#: Exit status for a malformed message from the other side.
EXIT_PROTOCOL = 1
#: Exit status for a line the harness cannot read.
EXIT_USAGE = 2


class HarnessError(Exception):
    """A line the harness cannot read, with its number and the reason."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def frame_size_limit(environ: Mapping[str, str]) -> int:
    """The frame size limit ``FRAMESIZELIMIT`` of ``environ`` names (0 when unset); raises :class:`HarnessError`."""
    text = environ.get("FRAMESIZELIMIT", "").strip()
    if not text:
        return 0
    try:
        limit = int(text)
    except ValueError:
        raise HarnessError(f"FRAMESIZELIMIT={text!r} is not a number of bytes", EXIT_USAGE) from None
    if limit < 0 or 0 < limit < MIN_FRAME_SIZE_LIMIT:
        raise HarnessError(f"FRAMESIZELIMIT={limit}: 0 (no limit) or at least {MIN_FRAME_SIZE_LIMIT} bytes", EXIT_USAGE)
    return limit


def _hex(text: str, what: str) -> bytes:
    try:
        return bytes.fromhex(text.strip())
    except ValueError:
        raise ValueError(f"{what} {text.strip()[:80]!r} is not hexadecimal") from None


class _Harness:
    """The state of one harness run: the storage, then the protocol side."""

    def __init__(self, frame_size_limit: int, out: TextIO) -> None:
        self.frame_size_limit = frame_size_limit
        self.out = out
        self.storage = VectorStorage()
        self.negentropy: Negentropy | None = None

    def write(self, *lines: str) -> None:
        self.out.write("".join(f"{line}\n" for line in lines))
        self.out.flush()

    def command(self, line: str) -> None:
        fields = line.rstrip("\r\n").split(",")
        name = fields[0]
        if name == "item":
            if len(fields) != 3:
                raise ValueError(f"item needs 2 fields (item,<timestamp>,<id hex>), got {len(fields) - 1}")
            if self.storage.sealed:
                raise ValueError("item after seal")
            try:
                timestamp = int(fields[1])
            except ValueError:
                raise ValueError(f"item timestamp {fields[1]!r} is not a number") from None
            self.storage.insert_item(Item(timestamp, _hex(fields[2], "item id")))
        elif name == "seal":
            if self.storage.sealed:
                raise ValueError("seal after seal")
            self.storage.seal()
            self.negentropy = Negentropy(self.storage, self.frame_size_limit)
        elif name == "initiate":
            self.write(f"msg,{self._side('initiate').initiate().hex()}")
        elif name == "msg":
            if len(fields) != 2:
                raise ValueError(f"msg needs 1 field (msg,<hex>), got {len(fields) - 1}")
            self.message(_hex(fields[1], "message"))
        else:
            raise ValueError(f"unknown command {name[:40]!r} (item, seal, initiate, msg)")

    def _side(self, command: str) -> Negentropy:
        if self.negentropy is None:
            raise ValueError(f"{command} before seal")
        return self.negentropy

    def message(self, data: bytes) -> None:
        side = self._side("msg")
        if side.is_initiator:
            answer, have, need = side.reconcile_initiator(data)
            lines = [f"have,{id.hex()}" for id in have] + [f"need,{id.hex()}" for id in need]
            lines.append("done" if answer is None else f"msg,{answer.hex()}")
            self.write(*lines)
            return
        try:
            self.write(f"msg,{side.reconcile(data).hex()}")
        except UnsupportedVersion as error:
            self.write(f"msg,{error.answer.hex()}")


def run(lines: Iterable[str], out: TextIO, frame_size_limit: int = 0) -> None:
    """Run the commands of ``lines``, writing the answers to ``out``; raises :class:`HarnessError`."""
    harness = _Harness(frame_size_limit, out)
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            harness.command(line)
        except ProtocolError as error:
            raise HarnessError(f"line {number}: malformed message: {error}", EXIT_PROTOCOL) from None
        except (ValueError, RuntimeError, IndexError) as error:
            raise HarnessError(f"line {number}: {error}", EXIT_USAGE) from None


def main(argv: list[str] | None = None) -> int:
    """The command: reads standard input, writes standard output; returns the exit status."""
    args = sys.argv[1:] if argv is None else argv
    if args:
        print(
            f"usage: python -m openprocurement_feed.reconcile.harness < commands (no arguments, got {args})",
            file=sys.stderr,
        )
        return EXIT_USAGE
    try:
        run(sys.stdin, sys.stdout, frame_size_limit(os.environ))
    except HarnessError as error:
        print(f"harness: {error}", file=sys.stderr)
        return error.status
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
