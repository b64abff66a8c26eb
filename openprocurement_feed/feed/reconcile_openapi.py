"""The reconcile endpoint's part of the OpenAPI document (SPEC G.2): its
``GET`` and ``POST`` for each feed (:func:`reconcile_part`)."""

from __future__ import annotations

import re
from typing import Any

from ..reconcile.endpoint import PROTOCOL
from ..settings import FeedSettings
from .reconcile import OCTET_STREAM, reconcile_path


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"application/json": {"schema": schema}}


def _error(description: str, retry_after: bool = False) -> dict[str, Any]:
    response: dict[str, Any] = {"description": description, "content": _json({"$ref": "#/components/schemas/Error"})}
    if retry_after:
        response["headers"] = {"Retry-After": {"$ref": "#/components/headers/RetryAfter"}}
    return response


def reconcile_template(feed: Any, settings: FeedSettings) -> str:
    """The reconcile path of ``feed`` under the same outer prefix as the feed's."""
    own = f"{settings.route_prefix}/{feed.path}"
    outer = feed.route_path[: len(feed.route_path) - len(own)] if feed.route_path.endswith(own) else ""
    return outer.rstrip("/") + reconcile_path(settings.route_prefix, feed.name)


def reconcile_part(feed: Any, settings: FeedSettings) -> dict[str, Any]:
    """The paths (``GET`` and ``POST``) and schemas of ``feed``'s reconcile endpoint."""
    name = "Reconcile_" + re.sub(r"[^A-Za-z0-9_]", "_", feed.name)
    parameters: list[dict[str, Any]] = [{"$ref": "#/components/parameters/mode"}]
    if feed.scope:
        parameters.append(
            {
                "name": feed.scope,
                "in": "query",
                "required": True,
                "description": f"The {feed.filter_field} the feed is filtered on (its scope).",
                "schema": {"type": "string", "minLength": 1},
            }
        )
    horizon = {
        "type": "object",
        "required": ["until", "protocol", "frame_size_limit", "records"],
        "properties": {
            "until": {
                "type": "integer",
                "minimum": 0,
                "description": "The feed's horizon in µs: reconcile the records below it, and pass it on every round.",
            },
            "protocol": {"const": PROTOCOL, "description": "Negentropy V1."},
            "frame_size_limit": {"type": "integer", "description": "The largest message, in bytes, either way."},
            "records": {"type": "integer", "minimum": 0, "description": "The feed's records below until."},
            "source": {
                "enum": ["aggregates", "feed"],
                "description": "Where the records come from: the follower's aggregates, or the feed itself.",
            },
        },
    }
    responses_common: dict[str, Any] = {
        "501": _error("The feed's ids are not 32 hexadecimal digits (or it masks dateModified): no records."),
        "503": _error(
            "The aggregates are catching up (or no follower keeps them and the feed shows more objects than "
            "feed.reconcile_feed_limit), the database is unavailable or a commit-ordered feed has no checkpoint "
            "yet: retry after Retry-After.",
            retry_after=True,
        ),
    }
    if feed.permission:
        responses_common["403"] = {"description": f"Not permitted (the feed needs {feed.permission!r})."}
    summary = f"Reconcile a copy of the {feed.name} feed"
    get = {
        "operationId": f"reconcile_{re.sub(r'[^A-Za-z0-9_]', '_', feed.name)}_horizon",
        "summary": summary + ": its horizon",
        "description": (
            "The horizon a reconciliation compares below, the protocol, the frame size limit and the "
            "number of records below the horizon (SPEC G.2). A record: the object's dateModified in µs "
            "and SHA-256 based 32-byte id (SPEC G.1)."
        ),
        "tags": ["feeds"],
        "parameters": parameters,
        "responses": {
            "200": {"description": "The horizon.", "content": _json({"$ref": f"#/components/schemas/{name}"})},
            "400": _error("A missing scope."),
            **responses_common,
        },
    }
    post = {
        "operationId": f"reconcile_{re.sub(r'[^A-Za-z0-9_]', '_', feed.name)}_round",
        "summary": summary + ": one round",
        "description": (
            "One Negentropy V1 message in, the server's message out; the server keeps no state between "
            "rounds. A message of another protocol version is answered with the version byte the "
            "server speaks."
        ),
        "tags": ["feeds"],
        "parameters": [
            *parameters,
            {
                "name": "until",
                "in": "query",
                "required": True,
                "description": "The horizon from GET, in µs (at most the feed's current horizon).",
                "schema": {"type": "string", "pattern": "^[0-9]{1,20}$"},
            },
        ],
        "requestBody": {
            "required": True,
            "content": {
                OCTET_STREAM: {
                    "schema": {"type": "string", "format": "binary", "maxLength": settings.reconcile_frame_size_limit}
                }
            },
        },
        "responses": {
            "200": {
                "description": "The server's message.",
                "content": {OCTET_STREAM: {"schema": {"type": "string", "format": "binary"}}},
            },
            "400": _error(
                "A malformed message (its version, a truncated varint, a bound out of order, an id list "
                "longer than the message, a bad mode), a body over the frame size limit, a missing, "
                "malformed or too high until, a missing scope."
            ),
            **responses_common,
        },
    }
    return {
        "paths": {reconcile_template(feed, settings): {"get": get, "post": post}},
        "components": {"schemas": {name: horizon}},
    }
