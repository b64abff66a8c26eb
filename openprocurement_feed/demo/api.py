"""Create, read and patch views of the demo API, one set per :class:`Resource`.

Every write runs in one multi-document transaction through the store's
``save_data`` (the path the race and the commit order are about), whatever
the resource. Server-owned fields in a body (``id``, ``dateCreated``,
``dateModified`` and the resource's generated identifier such as
``tenderID``) are dropped and the server's values kept, as upstream's
create and edit roles do; storage fields (``_id``, ``_rev``,
``public_modified``…) and keys starting with ``$`` are refused with 422.

Access (:mod:`.security`): a create needs the ``create`` permission and
answers the owner's access token once (``"access": {"token": ...}``; only
its hash is stored); a change needs ``create``, then ``edit`` on the stored
object (its owner with its token). An object view shows a restricted object
by its feed's rule (:func:`~openprocurement_feed.store.restricted.mask_object`).
"""

from __future__ import annotations

import math
import random
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from pymongo import ReturnDocument
from pymongo.errors import ConnectionFailure, DuplicateKeyError, PyMongoError
from pyramid.config import Configurator
from pyramid.httpexceptions import HTTPException, HTTPForbidden, HTTPMethodNotAllowed
from pyramid.request import Request

from ..feed.errors import error_body
from ..save_errors import TRANSIENT, save_error
from ..store.database import ConflictError, FeedStore
from ..store.restricted import mask_object
from .auth import TOKEN_FIELD, credentials_key, hash_token, new_token
from .idempotency import (
    KEYS,
    REPLAYED,
    InvalidKey,
    KeyReused,
    KeyTaken,
    body_digest,
    check_digest,
    invalid_key_view,
    key_id,
    key_record,
    key_reused_view,
    read_key,
)
from .resources import INTERNAL_FIELDS, Resource
from .security import CREATE, EDIT, OwnedObject

TRANSIENT_RETRIES = 5
#: The collection of the per-day counters behind the generated identifiers.
COUNTERS = "demo_counters"
#: The deepest nesting an object's body may have.
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
    """A stored object as the API shows it: ``id`` and its own fields."""
    data = {"id": doc["_id"]}
    data.update(
        (key, value)
        for key, value in doc.items()
        if key not in ("_id", "_rev", "is_public", "is_test", "public_modified", "public_ts", TOKEN_FIELD)
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


def read_data(request: Request, resource: Resource) -> dict[str, Any]:
    """The ``data`` object of a JSON body, checked, without server-owned fields."""
    try:
        body = request.json_body
    except (ValueError, LookupError, RecursionError) as error:
        # LookupError: a Content-Type charset Python has no text codec for
        # (``application/json; charset=x-unknown``, ``charset=rot13``)
        raise BadRequest("body", f"Expecting a JSON body: {error}") from None
    if not isinstance(body, dict) or not isinstance(body.get("data"), dict):
        raise BadRequest("data", 'Expecting an object {"data": {...}}')
    access = body.get("access", {})
    if not (isinstance(access, dict) and isinstance(access.get("token", ""), str)):
        raise BadRequest("access", 'Expecting "access": {"token": "..."}')
    data = body["data"]
    bad = sorted(key for key in data if key in INTERNAL_FIELDS or not isinstance(key, str) or key.startswith("$"))
    if bad:
        raise BadRequest("data", f"These fields cannot be set: {', '.join(bad)}")
    if "status" in data and data["status"] not in resource.statuses:
        raise BadRequest("status", f"Value must be one of {', '.join(resource.statuses)}")
    if "mode" in data and data["mode"] != "test":
        raise BadRequest("mode", "Value must be 'test'")
    check_storable(data)
    return {key: value for key, value in data.items() if key not in resource.server_fields}


def bad_request_view(exc: BadRequest, request: Request) -> dict[str, Any]:
    """422 with the JSON error body for a refused request body."""
    request.response.status = 422
    return error_body("body", exc.name, exc.description)


def http_error_view(exc: HTTPException, request: Request) -> dict[str, Any]:
    """Pyramid's HTTP errors (an unknown path, a method the route does not
    take) as JSON error bodies, like upstream's, instead of its text pages."""
    request.response.status = exc.status
    for name, value in exc.headers.items():
        if name.lower() in ("allow", "retry-after", "location"):
            request.response.headers[name] = value
    if exc.code == 404:
        return error_body("url", "url", "Not Found")
    if exc.code == 405:
        return error_body("url", "method", "Method not allowed")
    return error_body("url", "url", exc.title)


def forbidden_view(exc: HTTPForbidden, request: Request) -> dict[str, Any]:
    """A refused permission: **401** when the demo has an auth file and the
    request names no known user, **403** otherwise (another broker, or the
    owner without the object's access token), with upstream's error body."""
    result = getattr(exc, "result", None)
    reason = getattr(result, "msg", None) or exc.detail or "permission denied"
    if request.registry.demo_users is not None and request.authenticated_userid is None:
        request.response.status = 401
        request.response.headers["WWW-Authenticate"] = 'Basic realm="OpenProcurement"'
        if credentials_key(request) is None:
            description = "Unauthorized: writes need a broker's key (Authorization: Bearer <key>, or Basic <key>:)"
        else:
            description = "Unauthorized: the key is not one of the demo's users"
        return error_body("header", "Authorization", description)
    request.response.status = 403
    return error_body("url", "permission", f"Forbidden: {reason}")


def not_found(request: Request, resource: Resource) -> dict[str, Any]:
    request.response.status = 404
    return error_body("url", resource.key, "Not Found")


def _delay(request: Request) -> None:
    low, high = request.registry.demo_settings.write_delay_ms
    if high > 0:
        # bandit B311: a delay, not a secret
        time.sleep(random.uniform(low, high) / 1000.0)  # nosec B311


def in_transaction(request: Request, write: Callable[[Any], dict[str, Any] | None]) -> dict[str, Any] | None:
    """Run ``write(session)`` in a transaction that stays open for the write
    delay after the stamp.

    An error that aborted the transaction (``TransientTransactionError``: a
    write conflict, a refused statement) is retried, and after
    :data:`TRANSIENT_RETRIES` reported as a conflict. Other database errors
    are raised as the store's (:func:`~openprocurement_feed.save_errors.save_error`):
    :class:`~openprocurement_feed.save_errors.NotSaved` (503, nothing was
    written) or, from the commit,
    :class:`~openprocurement_feed.save_errors.SaveOutcomeUnknown` (504, a
    write concern error or an unknown commit result: it may be saved). A
    lost connection is not retried: it is reported at once (503)."""
    store: FeedStore = request.feed_store
    for attempt in range(TRANSIENT_RETRIES):
        # Each attempt stamps dateModified afresh (save_data stamps the
        # request's time): a retry after a competing commit must not write
        # an older dateModified than that commit's.
        request.feed_now = datetime.now(timezone.utc)
        committing = False
        try:
            with store.client.start_session() as session:
                with session.start_transaction():
                    result = write(session)
                    if result is not None:
                        _delay(request)
                    committing = True  # the with block's end commits
                return result
        except PyMongoError as error:
            failure = save_error(error, in_transaction=not committing, committing=committing)
            cause = getattr(failure, "error", failure)
            if failure.has_error_label(TRANSIENT) and not isinstance(cause, ConnectionFailure):
                request.registry.demo_stats.conflict()
                time.sleep(0.005 * (attempt + 1))
                continue
            if failure is error:
                raise
            raise failure from error
    raise ConflictError("the object is being changed by other requests")


def public_id(store: FeedStore, resource: Resource, moment: datetime) -> str:
    """The next generated identifier of ``resource`` for the day of
    ``moment``: ``UA-2026-12-02-000042-a`` (``UA-P-…`` for plans, a ``-c1``
    suffix for contracts).

    The per-day counter is taken outside the object's transaction, as
    upstream does: a write that fails leaves a gap, never a duplicate.
    """
    day = moment.strftime("%Y-%m-%d")
    counters = store.collection(COUNTERS)
    counter = None
    for _ in range(TRANSIENT_RETRIES):
        # Two first creates of a day race to insert the counter: the loser
        # gets a duplicate key (or, on the embedded server, no document)
        # and takes the next value from the winner's counter.
        try:
            counter = counters.find_one_and_update(
                {"_id": f"{resource.name}-{day}"},
                {"$inc": {"value": 1}},
                upsert=True,
                return_document=ReturnDocument.AFTER,
            )
        except DuplicateKeyError:
            counter = None
        if counter is not None:
            break
    if counter is None:
        raise ConflictError(f"the {resource.id_field} counter is being created by other requests")
    return f"{resource.id_prefix}-{day}-{counter['value']:06d}-a{resource.id_suffix}"


def create_view(resource: Resource) -> Callable[[Request], dict[str, Any]]:
    """``POST {prefix}/{resource}``: a new object, 201; with an
    ``Idempotency-Key`` (:mod:`.idempotency`), the object created with that
    key if there is one."""

    def create(request: Request) -> dict[str, Any]:
        key = read_key(request)
        data = read_data(request, resource)
        store: FeedStore = request.feed_store
        collection = store.collection(store_name(request, resource))
        ident = key_id(resource.name, request.authenticated_userid, key) if key is not None else None
        digest = body_digest(data)
        keys = store.collection(KEYS)
        if ident is not None:
            found = keys.find_one({"_id": ident})
            if found is not None:
                return replay(request, resource, collection, found, digest)
        moment = datetime.now(timezone.utc)
        stamp = moment.isoformat()
        obj = dict(data, _id=uuid.uuid4().hex, dateCreated=stamp, dateModified=stamp)
        obj[resource.id_field] = public_id(store, resource, moment)
        obj.setdefault("status", resource.default_status)
        if request.authenticated_userid is not None:
            obj["owner"] = request.authenticated_userid
        token = new_token()
        obj[TOKEN_FIELD] = hash_token(token)

        def write(session: Any) -> dict[str, Any]:
            if ident is not None:
                # the key and its object are saved together or not at all
                if keys.find_one({"_id": ident}, session=session) is not None:
                    raise KeyTaken()
                try:
                    keys.insert_one(key_record(ident, obj["_id"], digest, token), session=session)
                except DuplicateKeyError:
                    raise KeyTaken() from None
            return store.save_data(collection, obj, insert=True, session=session)

        try:
            saved = in_transaction(request, write)
        except ConflictError:
            if ident is None:
                raise
            # the IETF draft's 409: an attempt with this key is still open
            # (a commit whose result is unknown holds its key until the
            # database ends its transaction)
            raise ConflictError("a create with this Idempotency-Key is in progress; retry it later") from None
        except KeyTaken:
            assert ident is not None
            found = keys.find_one({"_id": ident})
            if found is None:  # the other attempt's transaction did not commit
                raise ConflictError("a create with this Idempotency-Key is in progress; retry it") from None
            return replay(request, resource, collection, found, digest)
        assert saved is not None
        request.response.status = 201
        request.response.headers["Location"] = request.route_url(
            f"demo.{resource.singular}", **{resource.key: saved["_id"]}
        )
        return {"data": public_view(saved), "access": {"token": token}}

    return create


def replay(
    request: Request, resource: Resource, collection: Any, record: dict[str, Any], digest: str
) -> dict[str, Any]:
    """The answer to a create whose ``Idempotency-Key`` is stored: 201 with
    the object created under it (its current state) and its access token."""
    check_digest(record, digest)
    doc = collection.find_one({"_id": record["object"]})
    if doc is None:
        return not_found(request, resource)
    request.response.status = 201
    request.response.headers["Location"] = request.route_url(f"demo.{resource.singular}", **{resource.key: doc["_id"]})
    request.response.headers[REPLAYED] = "true"
    return {"data": public_view(doc), "access": {"token": record["token"]}}


def get_view(resource: Resource) -> Callable[[Request], dict[str, Any]]:
    """``GET {prefix}/{resource}/{id}``."""

    def get(request: Request) -> dict[str, Any]:
        store: FeedStore = request.feed_store
        collection = store.collection(store_name(request, resource))
        doc = collection.find_one({"_id": request.matchdict[resource.key]})
        if doc is None:
            return not_found(request, resource)
        return {"data": public_view(mask_object(request, resource.name, doc))}

    return get


def patch_view(resource: Resource) -> Callable[[Request], dict[str, Any]]:
    """``PATCH {prefix}/{resource}/{id}``: merge the given fields, 200;
    403 unless the ``edit`` permission holds on the stored object."""

    def patch(request: Request) -> dict[str, Any]:
        data = read_data(request, resource)
        object_id = request.matchdict[resource.key]
        store: FeedStore = request.feed_store
        collection = store.collection(store_name(request, resource))

        def write(session: Any) -> dict[str, Any] | None:
            doc = collection.find_one({"_id": object_id}, session=session)
            if doc is None:
                return None
            # The stamp is taken once the object is read: a read held (a slow
            # or busy database) past a competing commit returns that commit's
            # version, and this one must not carry an older dateModified.
            request.feed_now = datetime.now(timezone.utc)
            allowed = request.has_permission(EDIT, OwnedObject(doc))
            if not allowed:
                raise HTTPForbidden(detail=allowed.msg, result=allowed)
            doc.update(data)
            doc["dateModified"] = now_iso()
            return store.save_data(collection, doc, session=session)

        saved = in_transaction(request, write)
        if saved is None:
            return not_found(request, resource)
        return {"data": public_view(mask_object(request, resource.name, saved))}

    return patch


def store_name(request: Request, resource: Resource) -> str:
    """The collection of ``resource`` (``mongodb.<name>_collection``, else its name)."""
    name: str = request.registry.feed_settings.collection_name(resource.name)
    return name


def add_resource_routes(config: Configurator, resource: Resource) -> None:
    """Register the create, read and patch routes of ``resource`` under
    ``feed.route_prefix``.

    The create route only matches ``POST`` so that ``GET`` on the same path
    falls through to the feed.
    """
    prefix = config.registry.feed_settings.route_prefix
    create_route = f"demo.{resource.name}.create"
    item_route = f"demo.{resource.singular}"
    config.add_route(create_route, f"{prefix}/{resource.name}", request_method="POST")
    config.add_route(item_route, f"{prefix}/{resource.name}/{{{resource.key}}}")
    config.add_view(create_view(resource), route_name=create_route, renderer="json", permission=CREATE)
    config.add_view(get_view(resource), route_name=item_route, request_method="GET", renderer="json")
    config.add_view(
        patch_view(resource), route_name=item_route, request_method="PATCH", renderer="json", permission=CREATE
    )


def add_error_views(config: Configurator) -> None:
    """JSON bodies for refused request bodies (422), refused permissions
    (401/403) and Pyramid's other HTTP errors, an unknown path included (404)."""
    config.add_view(bad_request_view, context=BadRequest, renderer="json")
    config.add_view(invalid_key_view, context=InvalidKey, renderer="json")
    config.add_view(key_reused_view, context=KeyReused, renderer="json")
    config.add_notfound_view(http_error_view, renderer="json")
    config.add_forbidden_view(forbidden_view, renderer="json")
    for context in (HTTPException, HTTPMethodNotAllowed):
        config.add_exception_view(http_error_view, context=context, renderer="json")
