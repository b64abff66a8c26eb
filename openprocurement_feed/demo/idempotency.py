"""Idempotent creation: the ``Idempotency-Key`` header of the demo's POST.

A client that did not learn whether its create was saved (a 504
``outcome_unknown``, a lost connection, a timeout of its own) sends the
same request again with the same ``Idempotency-Key`` (the header of the
IETF HTTPAPI draft "The Idempotency-Key HTTP Header Field"). The key is
stored with the object, in the same transaction, in the
:data:`KEYS` collection under ``{resource, broker, key}``: the object and
its key are saved together or not at all. A request whose key is stored
gets the object created with it: **201** with its current state, its
``Location``, the access token the first answer gave, and the header
``Idempotent-Replayed: true``; no second object is created. The same key
with another body is refused (422), as the draft asks.

The key record keeps the access token in clear so that a retry receives
it (the first answer may never have arrived); it is read only by the same
broker presenting the same key.

A key record lives ``demo.idempotency_ttl_seconds`` (24 hours by default):
a TTL index on its ``created`` date (:func:`ensure_key_expiry`) lets the
database remove it after that (its TTL monitor runs once a minute, so a
record goes up to a minute later). The collection holds the keys of one
TTL's creates, whatever the API's age. A retry after its key expired is a
new create: it creates a second object, with a new token. Clients retry
within minutes; the draft leaves the expiry to the server and asks it to
publish it.
"""

from __future__ import annotations

import hashlib
import json
import re
from datetime import datetime, timezone
from typing import Any

from pymongo.collection import Collection
from pymongo.errors import OperationFailure
from pyramid.request import Request

from ..feed.errors import error_body

#: The request header.
HEADER = "Idempotency-Key"
#: The answer's header on a replayed create.
REPLAYED = "Idempotent-Replayed"
#: The collection of the keys.
KEYS = "demo_idempotency_keys"
#: The name of the TTL index of the keys' ``created`` date.
TTL_INDEX = "created_ttl"
#: How long a key lives by default (s): 24 hours.
DEFAULT_TTL_SECONDS = 86_400
#: ``IndexOptionsConflict``, ``IndexKeySpecsConflict``: the index is there
#: with another expiry.
INDEX_CONFLICTS = (85, 86)
#: The longest key accepted.
MAX_LENGTH = 128
#: A key: visible ASCII but ``"`` and ``\``, optionally in double quotes
#: (the draft's form is a structured-field string: ``"8e03978e-..."``).
KEY_RE = re.compile(r"^[\x21\x23-\x5b\x5d-\x7e]{1," + str(MAX_LENGTH) + "}$")
#: The header's value as the OpenAPI document says it: a key, bare or quoted.
KEY_PATTERN = r'^(?:[!#-\[\]-~]{1,128}|"[!#-\[\]-~]{1,128}")$'


class InvalidKey(ValueError):
    """An ``Idempotency-Key`` header the API refuses (400)."""


class KeyReused(ValueError):
    """A stored key sent with another request body (422)."""


class KeyTaken(Exception):
    """Inside a create's transaction: the key is stored already (by an
    earlier attempt or a concurrent one); the create answers its object."""


def read_key(request: Request) -> str | None:
    """The request's idempotency key, or None without the header.

    :raises InvalidKey: for an empty, too long or non-ASCII key.
    """
    raw = request.headers.get(HEADER)
    if raw is None:
        return None
    key = str(raw)
    if len(key) >= 2 and key[0] == key[-1] == '"':
        key = key[1:-1]
    if not KEY_RE.match(key):
        raise InvalidKey(
            f"expected 1 to {MAX_LENGTH} visible ASCII characters other than '\"' and '\\' "
            "(a UUID is a good key), optionally in double quotes"
        )
    return key


def key_id(resource: str, broker: str | None, key: str) -> dict[str, str]:
    """The ``_id`` of a key's record: the key is the broker's, per resource."""
    return {"resource": resource, "broker": broker or "", "key": key}


def body_digest(data: Any) -> str:
    """A digest of a create's request data (its key must not serve another)."""
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str, ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def key_record(ident: dict[str, str], object_id: str, digest: str, token: str) -> dict[str, Any]:
    """The record stored with the object it created."""
    return {
        "_id": ident,
        "object": object_id,
        "digest": digest,
        "token": token,
        "created": datetime.now(timezone.utc),
    }


def ensure_key_expiry(keys: Collection[Any], seconds: int) -> str:
    """The TTL index that removes a key record ``seconds`` after its
    ``created`` date, made or (another expiry) changed with ``collMod``;
    its name."""
    try:
        return keys.create_index("created", name=TTL_INDEX, expireAfterSeconds=seconds)
    except OperationFailure as error:
        if error.code not in INDEX_CONFLICTS:
            raise
    keys.database.command("collMod", keys.name, index={"name": TTL_INDEX, "expireAfterSeconds": seconds})
    return TTL_INDEX


def check_digest(record: dict[str, Any], digest: str) -> None:
    """:raises KeyReused: when ``record`` was stored for another body."""
    if record.get("digest") != digest:
        raise KeyReused("this Idempotency-Key was used for a create with another body; use a new key for a new object")


def invalid_key_view(exc: InvalidKey, request: Request) -> dict[str, Any]:
    """400 with the JSON error body for a malformed key."""
    request.response.status = 400
    return error_body("header", HEADER, f"Invalid {HEADER}: {exc}")


def key_reused_view(exc: KeyReused, request: Request) -> dict[str, Any]:
    """422 with the JSON error body for a key sent with another body."""
    request.response.status = 422
    return error_body("header", HEADER, str(exc))
