"""Tender create, read and patch views of the demo API."""
from __future__ import annotations

import math
import random
import time
import uuid
from datetime import datetime, timezone
from typing import Any, Callable

from pymongo.errors import ConnectionFailure, OperationFailure, PyMongoError
from pyramid.config import Configurator
from pyramid.request import Request

from ..database import ConflictError, FeedStore
from ..errors import error_body

COLLECTION = "tenders"
#: Fields feed clients may ask for with ``opt_fields``.
FEED_FIELDS = ("dateCreated", "mode", "status", "tenderID", "title")
#: Keys a client may not set: they belong to the store or the API.
RESERVED = frozenset(
    {"id", "_id", "_rev", "dateModified", "dateCreated", "public_modified",
     "public_ts", "is_public", "is_test", "owner"}
)
STATUSES = ("draft", "active", "complete", "cancelled", "unsuccessful", "deleted")
TRANSIENT_RETRIES = 5
#: The deepest nesting a tender body may have.
MAX_DEPTH = 32
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


class BadRequest(ValueError):
    """A request body the API refuses; ``name`` names the offending part."""

    def __init__(self, name: str, description: str) -> None:
        super().__init__(description)
        self.name = name
        self.description = description


def now_iso() -> str:
    """The current time as an ISO-8601 string with its UTC offset."""
    return datetime.now(timezone.utc).isoformat()


def public_view(doc: dict[str, Any]) -> dict[str, Any]:
    """A stored tender as the API shows it: ``id`` and its own fields."""
    data = {"id": doc["_id"]}
    data.update(
        (key, value)
        for key, value in doc.items()
        if key not in ("_id", "_rev", "is_public", "is_test", "public_modified", "public_ts")
    )
    return data


def check_storable(value: Any, path: str = "data", depth: int = 0) -> None:
    """Refuse what JSON allows but the database or a JSON reply cannot hold:
    integers beyond 64 bits, NaN and infinities, NUL in keys, deep nesting."""
    if depth > MAX_DEPTH:
        raise BadRequest("data", f"{path}: nested deeper than {MAX_DEPTH} levels")
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return
    if isinstance(value, int):
        if not INT64_MIN <= value <= INT64_MAX:
            raise BadRequest("data", f"{path}: integer out of the 64-bit range")
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise BadRequest("data", f"{path}: numbers must be finite")
    elif isinstance(value, dict):
        for key, item in value.items():
            if "\x00" in key:
                raise BadRequest("data", f"{path}: a key contains a NUL character")
            check_storable(item, f"{path}.{key}", depth + 1)
    elif isinstance(value, list):
        for number, item in enumerate(value):
            check_storable(item, f"{path}[{number}]", depth + 1)


def read_data(request: Request) -> dict[str, Any]:
    """The ``data`` object of a JSON body, with its fields checked."""
    try:
        body = request.json_body
    except (ValueError, RecursionError) as error:
        raise BadRequest("body", f"Expecting a JSON body: {error}") from None
    if not isinstance(body, dict) or not isinstance(body.get("data"), dict):
        raise BadRequest("data", "Expecting an object {\"data\": {...}}")
    data = body["data"]
    bad = sorted(key for key in data if key in RESERVED or not isinstance(key, str) or key.startswith("$"))
    if bad:
        raise BadRequest("data", f"These fields cannot be set: {', '.join(bad)}")
    if "status" in data and data["status"] not in STATUSES:
        raise BadRequest("status", f"Value must be one of {', '.join(STATUSES)}")
    if "mode" in data and data["mode"] != "test":
        raise BadRequest("mode", "Value must be 'test'")
    check_storable(data)
    return data


def bad_request_view(exc: BadRequest, request: Request) -> dict[str, Any]:
    """422 with the JSON error body for a refused request body."""
    request.response.status = 422
    return error_body("body", exc.name, exc.description)


def not_found(request: Request) -> dict[str, Any]:
    request.response.status = 404
    return error_body("url", "tender_id", "Not Found")


def _delay(request: Request) -> None:
    low, high = request.registry.demo_settings.write_delay_ms
    if high > 0:
        time.sleep(random.uniform(low, high) / 1000.0)


def in_transaction(request: Request, write: Callable[[Any], dict[str, Any] | None]) -> dict[str, Any] | None:
    """Run ``write(session)`` in a transaction that stays open for the write
    delay after the stamp; transient errors are retried, then reported as
    a conflict. A lost connection is not retried: it is reported at once
    (503 by the extension's error view)."""
    store: FeedStore = request.feed_store
    for attempt in range(TRANSIENT_RETRIES):
        # Each attempt stamps dateModified afresh (save_data stamps the
        # request's time): a retry after a competing commit must not write
        # an older dateModified than that commit's.
        request.feed_now = datetime.now(timezone.utc)
        try:
            with store.client.start_session() as session:
                with session.start_transaction():
                    result = write(session)
                    if result is not None:
                        _delay(request)
                return result
        except OperationFailure as error:
            if not error.has_error_label("TransientTransactionError"):
                raise
            request.registry.demo_stats.conflict()
            time.sleep(0.005 * (attempt + 1))
        except ConnectionFailure:
            # Unreachable database: answer 503 now (the client retries after
            # Retry-After) instead of waiting out one server selection per retry.
            raise
        except PyMongoError as error:
            if not error.has_error_label("TransientTransactionError"):
                raise
            request.registry.demo_stats.conflict()
    raise ConflictError("the tender is being changed by other requests")


def create_tender(request: Request) -> dict[str, Any]:
    """``POST {prefix}/tenders``: a new tender, 201."""
    data = read_data(request)
    stamp = now_iso()
    tender = dict(data, _id=uuid.uuid4().hex, dateCreated=stamp, dateModified=stamp)
    tender.setdefault("status", "active")
    if request.authenticated_userid is not None:
        tender["owner"] = request.authenticated_userid
    store: FeedStore = request.feed_store
    collection = store.collection(COLLECTION)
    saved = in_transaction(
        request, lambda session: store.save_data(collection, tender, insert=True, session=session)
    )
    assert saved is not None
    request.response.status = 201
    request.response.headers["Location"] = request.route_url(
        "demo.tender", tender_id=saved["_id"]
    )
    return {"data": public_view(saved)}


def get_tender(request: Request) -> dict[str, Any]:
    """``GET {prefix}/tenders/{id}``."""
    store: FeedStore = request.feed_store
    doc = store.collection(COLLECTION).find_one({"_id": request.matchdict["tender_id"]})
    if doc is None:
        return not_found(request)
    return {"data": public_view(doc)}


def patch_tender(request: Request) -> dict[str, Any]:
    """``PATCH {prefix}/tenders/{id}``: merge the given fields, 200."""
    data = read_data(request)
    tender_id = request.matchdict["tender_id"]
    store: FeedStore = request.feed_store
    collection = store.collection(COLLECTION)

    def write(session: Any) -> dict[str, Any] | None:
        doc = collection.find_one({"_id": tender_id}, session=session)
        if doc is None:
            return None
        doc.update(data)
        doc["dateModified"] = now_iso()
        return store.save_data(collection, doc, session=session)

    saved = in_transaction(request, write)
    if saved is None:
        return not_found(request)
    return {"data": public_view(saved)}


def add_tender_routes(config: Configurator) -> None:
    """Register the tender routes under ``feed.route_prefix``.

    The create route only matches ``POST`` so that ``GET`` on the same path
    falls through to the feed.
    """
    prefix = config.registry.feed_settings.route_prefix
    config.add_route("demo.tenders.create", f"{prefix}/tenders", request_method="POST")
    config.add_route("demo.tender", f"{prefix}/tenders/{{tender_id}}")
    config.add_view(create_tender, route_name="demo.tenders.create", renderer="json")
    config.add_view(get_tender, route_name="demo.tender", request_method="GET", renderer="json")
    config.add_view(patch_tender, route_name="demo.tender", request_method="PATCH", renderer="json")
    config.add_view(bad_request_view, context=BadRequest, renderer="json")
