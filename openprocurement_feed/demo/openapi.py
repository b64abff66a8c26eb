"""The demo's resources in the OpenAPI document (``config.add_openapi_paths``).

For each :class:`~.resources.Resource`: ``POST {prefix}/{resource}`` (beside
its feed's ``GET`` on the same path), ``GET`` and ``PATCH``
``{prefix}/{resource}/{id}``; their bodies and errors as :mod:`.api`
answers them, and, with ``demo.auth_file``, the two ways a broker sends its
key (HTTP Basic with the key as the user name, or a bearer token) and the
three ways a change carries the object's access token. Links from a
create's answer to the read and the change of the object it made let a
client (or a stateful fuzzer) follow them.
"""

from __future__ import annotations

from typing import Any

from ..feed.openapi import error_response, json_content, ref
from .idempotency import KEY_PATTERN
from .resources import INTERNAL_FIELDS, RESOURCES, Resource

#: The security schemes of a demo with an auth file.
SECURITY_SCHEMES = {
    "brokerBasic": {
        "type": "http",
        "scheme": "basic",
        "description": "The broker's key as the user name, no password (curl -u KEY: ...).",
    },
    "brokerBearer": {"type": "http", "scheme": "bearer", "description": "Authorization: Bearer KEY."},
}
SECURITY: list[dict[str, list[str]]] = [{"brokerBasic": []}, {"brokerBearer": []}]


def title(resource: Resource) -> str:
    """``Tender`` for tenders: the schema and operation names' stem."""
    return resource.singular.capitalize()


def data_schema(resource: Resource) -> dict[str, Any]:
    """What a body's ``data`` may hold: any fields but the storage ones
    (refused with 422); the server-owned ones are ignored."""
    return {
        "type": "object",
        "description": (
            f"The {resource.singular}'s fields. id, dateCreated, dateModified and {resource.id_field} are "
            f"the server's (ignored); {', '.join(sorted(INTERNAL_FIELDS))} and names starting with $ are "
            "refused (422), and so are integers beyond 64 bits, NUL in keys and nesting deeper than 32."
        ),
        "properties": {
            "status": {"enum": list(resource.statuses)},
            "mode": {"const": "test", "description": "A test object (mode=test in the feed)."},
        },
        "propertyNames": {"not": {"anyOf": [{"enum": sorted(INTERNAL_FIELDS)}, {"pattern": "^\\$"}]}},
        "additionalProperties": True,
    }


def object_schema(resource: Resource) -> dict[str, Any]:
    """An object as the API shows it (a restricted one possibly masked)."""
    return {
        "type": "object",
        "required": ["id", "dateCreated", "dateModified", resource.id_field, "status"],
        "properties": {
            "id": {"type": "string"},
            "dateCreated": {"type": "string"},
            "dateModified": {"type": "string"},
            resource.id_field: {"type": "string"},
            "status": {"type": "string"},
            "owner": {"type": "string", "description": "The broker that created it."},
        },
        "additionalProperties": True,
    }


def resource_part(resource: Resource, prefix: str, secured: bool) -> dict[str, Any]:
    """The paths and schemas of one resource."""
    name = title(resource)
    key = resource.key
    body = {
        "type": "object",
        "required": ["data"],
        "properties": {
            "data": ref(f"{name}Data"),
            "access": {
                "type": "object",
                "description": "The object's access token (a change may carry it here).",
                "properties": {"token": {"type": "string"}},
            },
        },
    }
    answer = {"type": "object", "required": ["data"], "properties": {"data": ref(name)}}
    created = {
        "type": "object",
        "required": ["data", "access"],
        "properties": {
            "data": ref(name),
            "access": {
                "type": "object",
                "required": ["token"],
                "description": "The owner's access token, answered once: keep it to change the object.",
                "properties": {"token": {"type": "string"}},
            },
        },
    }
    errors: dict[str, Any] = {
        "409": error_response(
            "The object is being changed by other requests, or a create with the same Idempotency-Key is "
            "in progress: re-read and retry."
        ),
        "422": error_response(
            'A body that is not {"data": {...}} or holds a refused field or value, or an Idempotency-Key '
            "already used with another body."
        ),
        "503": error_response(
            "The database is unreachable or did not save the change (name not_saved): nothing was written; "
            "retry the same request after Retry-After.",
            retry_after=True,
        ),
        "504": error_response(
            "The database did not confirm the change (name outcome_unknown): it may have been saved. "
            "Re-read the object before changing it again; retry a create with the same Idempotency-Key.",
            retry_after=True,
        ),
    }
    unauthorized = {"401": error_response("No key, or a key the demo does not know.")} if secured else {}
    id_parameter = {
        "name": key,
        "in": "path",
        "required": True,
        "description": f"The {resource.singular}'s id.",
        "schema": {"type": "string", "minLength": 1, "pattern": "^[^/]+$"},
    }
    not_found = error_response(f"No {resource.singular} of that id.")
    create: dict[str, Any] = {
        "operationId": f"create{name}",
        "summary": f"Create a {resource.singular}",
        "tags": [resource.name],
        "description": (
            "With an Idempotency-Key header, a retry of the same create (same broker, key and body) answers "
            "the object the key created, with the same access token and Idempotent-Replayed: true, and "
            "creates no other."
        ),
        "parameters": [
            {
                "name": "Idempotency-Key",
                "in": "header",
                "description": (
                    "A key of the client's choosing (a UUID) that a retry of this create repeats; "
                    "optionally in double quotes. A malformed key is refused with 400."
                ),
                "schema": {"type": "string", "minLength": 1, "maxLength": 130, "pattern": KEY_PATTERN},
            }
        ],
        "requestBody": {"required": True, "content": json_content(body)},
        "responses": {
            "201": {
                "description": (
                    f"The new {resource.singular} and its owner's access token (or, for a retry with an "
                    "Idempotency-Key, the one that key created)."
                ),
                "headers": {
                    "Location": {"description": "The object's URL.", "schema": {"type": "string"}},
                    "Idempotent-Replayed": {
                        "description": "true when the answer is a retry's: the object was created before.",
                        "schema": {"type": "string", "enum": ["true"]},
                    },
                },
                "content": json_content(created),
                "links": {
                    f"get{name}": {
                        "operationId": f"get{name}",
                        "parameters": {key: "$response.body#/data/id"},
                    },
                    f"patch{name}": {
                        "operationId": f"patch{name}",
                        "parameters": {key: "$response.body#/data/id", "acc_token": "$response.body#/access/token"},
                    },
                },
            },
            "400": ref("BadRequest", "responses"),
            **unauthorized,
            **errors,
        },
    }
    read = {
        "operationId": f"get{name}",
        "summary": f"Read a {resource.singular}",
        "description": (
            "Open to everyone. A restricted object is shown in full to its owner and to brokers "
            "accredited r; to everyone else with its masked fields replaced by placeholders."
        ),
        "tags": [resource.name],
        "parameters": [id_parameter],
        "responses": {
            "200": {"description": f"The {resource.singular}.", "content": json_content(answer)},
            "400": ref("BadRequest", "responses"),
            "404": not_found,
            "503": ref("Unavailable", "responses"),
        },
    }
    change: dict[str, Any] = {
        "operationId": f"patch{name}",
        "summary": f"Change a {resource.singular}",
        "description": "Merges the given fields."
        + (" Needs the owner's key and the object's access token." if secured else ""),
        "tags": [resource.name],
        "parameters": [
            id_parameter,
            {
                "name": "acc_token",
                "in": "query",
                "description": "The object's access token.",
                "schema": {"type": "string"},
            },
            {
                "name": "X-Access-Token",
                "in": "header",
                "description": "The object's access token.",
                "schema": {"type": "string"},
            },
        ],
        "requestBody": {"required": True, "content": json_content(body)},
        "responses": {
            "200": {"description": f"The changed {resource.singular}.", "content": json_content(answer)},
            "400": ref("BadRequest", "responses"),
            **unauthorized,
            **({"403": error_response("Another broker, or the owner without the access token.")} if secured else {}),
            "404": not_found,
            **errors,
        },
    }
    if secured:
        create["security"] = SECURITY
        change["security"] = SECURITY
    return {
        "paths": {
            f"{prefix}/{resource.name}": {"post": create},
            f"{prefix}/{resource.name}/{{{key}}}": {"get": read, "patch": change},
        },
        "components": {"schemas": {name: object_schema(resource), f"{name}Data": data_schema(resource)}},
        "tags": [{"name": resource.name, "description": f"The demo's {resource.name}."}],
    }


def demo_openapi(registry: Any) -> dict[str, Any]:
    """The demo's part of the OpenAPI document (its resources, and its
    security schemes with ``demo.auth_file``)."""
    prefix = registry.feed_settings.route_prefix
    secured = getattr(registry, "demo_users", None) is not None
    part: dict[str, Any] = {"paths": {}, "components": {"schemas": {}}, "tags": []}
    for resource in RESOURCES:
        piece = resource_part(resource, prefix, secured)
        part["paths"].update(piece["paths"])
        part["components"]["schemas"].update(piece["components"]["schemas"])
        part["tags"].extend(piece["tags"])
    if secured:
        part["components"]["securitySchemes"] = SECURITY_SCHEMES
    part["info"] = {
        "title": "openprocurement_feed demo API",
        "version": "2.5",
        "description": (
            "The demo's tenders, plans and contracts and their feeds. Sync a feed: ask for ?descending=1, "
            "follow next_page backward to an empty page, then the first page's prev_page and next_page "
            "forward forever. Never parse offsets."
        ),
    }
    return part
