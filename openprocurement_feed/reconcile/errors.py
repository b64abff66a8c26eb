"""The errors of the reconciliation protocol.

A malformed message raises :class:`ProtocolError`, whose text is one precise
sentence naming what is wrong and where (the byte offset in the message):
an endpoint shows it to the client as it is, a harness prints it.
"""

from __future__ import annotations

__all__ = ["FrameSizeError", "ProtocolError", "UnsupportedVersion"]


class ProtocolError(ValueError):
    """A message that is not a well-formed Negentropy V1 message."""


class FrameSizeError(ProtocolError):
    """A message over the frame size limit of the side that reads it."""


class UnsupportedVersion(ProtocolError):
    """A message of another protocol version (the byte 0x60 + version).

    The specification says a responder answers it with one byte, the highest
    version it speaks, so that the initiator can downgrade and retry:
    :attr:`answer` holds that byte (``b"\\x61"``). A responder catches this
    error before :class:`ProtocolError` and sends :attr:`answer` as a normal
    answer; an initiator has nothing to answer and treats it as an error.
    """

    def __init__(self, message: str, answer: bytes) -> None:
        super().__init__(message)
        #: The answer a responder sends back: its own protocol version byte.
        self.answer = answer
