"""Range-based set reconciliation: the Negentropy V1 protocol, in pure Python.

Two sides holding sets of ``(timestamp, 32-byte id)`` items learn which
items each holds and the other lacks, at a cost that grows with the number
of differences, not with the size of the sets. The messages are byte for
byte those of the reference implementations (hoytech/negentropy), so either
side talks to any of them.

* :mod:`.varint`, :mod:`.items`, :mod:`.fingerprint`, :mod:`.wire`: the wire
  format's parts;
* :mod:`.storage`: what the protocol asks of a set, and the in-memory one;
* :mod:`.negentropy`: the initiator's and the responder's steps;
* :mod:`.records`: the records of a feed's objects (SPEC G.1);
* :mod:`.harness`: the reference's conformance harness line protocol.

The package imports nothing but the standard library.
"""

from __future__ import annotations

from .errors import FrameSizeError, ProtocolError, UnsupportedVersion
from .fingerprint import FINGERPRINT_SIZE, Accumulator, from_limbs, id_int, limbs
from .items import ID_SIZE, MAX_TIMESTAMP, Bound, Item
from .negentropy import Negentropy
from .records import is_feed_id, object_id, record, record_id, timestamp_us
from .storage import Storage, VectorStorage
from .varint import decode_varint, encode_varint
from .wire import PROTOCOL_VERSION

__all__ = [
    "FINGERPRINT_SIZE",
    "ID_SIZE",
    "MAX_TIMESTAMP",
    "PROTOCOL_VERSION",
    "Accumulator",
    "Bound",
    "FrameSizeError",
    "Item",
    "Negentropy",
    "ProtocolError",
    "Storage",
    "UnsupportedVersion",
    "VectorStorage",
    "decode_varint",
    "encode_varint",
    "from_limbs",
    "id_int",
    "is_feed_id",
    "limbs",
    "object_id",
    "record",
    "record_id",
    "timestamp_us",
]
