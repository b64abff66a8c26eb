"""An OpenAPI 3.1 document of the feed protocol, generated from the registered feeds.

:func:`openapi_document` builds the document from what the application
knows: one ``GET`` operation per feed of the state's ``definitions`` (its
path and scope parameter, its default and allowed fields, whether it is
restricted, the permission it requires), the query parameters of the
protocol with the limits of :class:`~.settings.FeedSettings` (``limit``,
``timeout``), the page body and the JSON error body. Nothing about a feed
is written twice: a feed added with ``config.add_feed`` is in the document.

A host adds its own operations through a hook
(``config.add_openapi_paths(hook)``): ``hook(registry)`` returns a partial
document (``paths`` and ``components``) merged into the feeds'. A path the
feeds and the host share (a resource's ``POST`` on its feed's path) gets the
operations of both.

With ``feed.openapi = true`` (the default) the include serves the document
at ``{route_prefix}/feeds/openapi.json`` (:data:`OPENAPI_ROUTE`); its
``servers`` entry is the application's URL as the request reached it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pyramid.config import Configurator
from pyramid.request import Request
from pyramid.security import NO_PERMISSION_REQUIRED

from ..settings import FeedSettings
from ..store.state import feed_state
from .reconcile_openapi import reconcile_part

#: The OpenAPI version of the document.
OPENAPI_VERSION = "3.1.0"
#: The route (name) of the document's view.
OPENAPI_ROUTE = "openprocurement_feed.openapi"
#: Where the document is served, under the feed's route prefix.
OPENAPI_SUFFIX = "/feeds/openapi.json"
#: A ``{name}`` or ``{name:regex}`` placeholder of a Pyramid route pattern.
PLACEHOLDER_RE = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)(?::((?:[^{}]|\{[^{}]*\})*))?\}")
#: The media type of every body.
JSON = "application/json"

OpenAPIHook = Callable[[Any], Mapping[str, Any]]


def ref(name: str, kind: str = "schemas") -> dict[str, str]:
    """A ``$ref`` to ``#/components/{kind}/{name}``."""
    return {"$ref": f"#/components/{kind}/{name}"}


def json_content(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A ``content`` map of one JSON body."""
    return {JSON: {"schema": dict(schema)}}


def error_response(description: str, retry_after: bool = False) -> dict[str, Any]:
    """A response with the JSON error body (and ``Retry-After`` when asked)."""
    response: dict[str, Any] = {"description": description, "content": json_content(ref("Error"))}
    if retry_after:
        response["headers"] = {"Retry-After": ref("RetryAfter", "headers")}
    return response


def openapi_path(settings: FeedSettings) -> str:
    """The path the document is served at."""
    return f"{settings.route_prefix}{OPENAPI_SUFFIX}"


def path_template(pattern: str) -> tuple[str, dict[str, str | None]]:
    """A Pyramid route pattern as an OpenAPI path template, and each of its
    placeholders with its regular expression (None: any segment)."""
    params: dict[str, str | None] = {}

    def replace(match: re.Match[str]) -> str:
        params[match.group(1)] = match.group(2)
        return "{" + match.group(1) + "}"

    template = PLACEHOLDER_RE.sub(replace, pattern)
    if not template.startswith("/"):
        template = "/" + template
    return template, params


def path_parameters(params: Mapping[str, str | None], descriptions: Mapping[str, str]) -> list[dict[str, Any]]:
    """The path parameters of a template (``descriptions``: by name)."""
    found = []
    for name, regex in params.items():
        # Pyramid matches a placeholder against one non-empty path segment
        schema: dict[str, Any] = {"type": "string", "minLength": 1, "pattern": "^[^/]+$"}
        if regex:
            schema["pattern"] = f"^(?:{regex})$"
        found.append(
            {
                "name": name,
                "in": "path",
                "required": True,
                "description": descriptions.get(name, f"the {name} of the route"),
                "schema": schema,
            }
        )
    return found


def feed_parameters(settings: FeedSettings) -> dict[str, Any]:
    """The query parameters every feed takes (``components/parameters``)."""
    return {
        "offset": {
            "name": "offset",
            "in": "query",
            "description": (
                "The opaque cursor of a previous page's next_page or prev_page; empty or absent: "
                "the first page. An invalid offset is a 404: restart the sync from the newest page."
            ),
            "schema": {"type": "string"},
        },
        "limit": {
            "name": "limit",
            "in": "query",
            "description": (
                f"The page size: default {settings.default_limit}, clamped to [1, {settings.max_limit}]; "
                "a non-integer is a 400; empty: the default. The clamped value is echoed in the links."
            ),
            "schema": {"anyOf": [{"type": "integer"}, {"const": ""}]},
        },
        "descending": {
            "name": "descending",
            "in": "query",
            "description": "Any non-empty value: newest first (echoed as descending=1).",
            "schema": {"type": "string"},
            "examples": {"newest first": {"value": "1"}},
        },
        "mode": {
            "name": "mode",
            "in": "query",
            "description": "test: only test objects; _all_: test and real; anything else or absent: only real.",
            "schema": {"type": "string"},
            "examples": {"test objects": {"value": "test"}, "all objects": {"value": "_all_"}},
        },
        "feed": {
            "name": "feed",
            "in": "query",
            "description": (
                "longpoll: a forward request whose page would be empty waits for the next change "
                "(up to timeout seconds); any other value is ignored. With descending: 400."
            ),
            "schema": {"type": "string"},
            "examples": {"long-poll": {"value": "longpoll"}},
        },
        "timeout": {
            "name": "timeout",
            "in": "query",
            "description": (
                f"With feed=longpoll: the seconds the request may wait, 0 to {settings.longpoll_max_seconds:g} "
                f"(default {settings.longpoll_default_seconds:g}); outside that range a 400. Ignored otherwise."
            ),
            # a string: without feed=longpoll any value is ignored (not refused)
            "schema": {"type": "string"},
            "examples": {
                "seconds": {"value": f"{settings.longpoll_default_seconds:g}"},
                "at once": {"value": "0"},
            },
        },
    }


def base_components() -> dict[str, Any]:
    """The schemas, headers and responses every feed shares."""
    link = {
        "type": "object",
        "description": "A page link: the same parameters, another offset.",
        "required": ["offset", "path", "uri"],
        "properties": {
            "offset": {"type": "string", "description": "The offset of the linked page (keep it)."},
            "path": {"type": "string", "description": "The path and query of the linked page."},
            "uri": {"type": "string", "description": "The absolute URL of the linked page."},
        },
    }
    error = {
        "type": "object",
        "description": "Every error: a status and at least one error naming the offending part.",
        "required": ["status", "errors"],
        "properties": {
            "status": {"const": "error"},
            "errors": {
                "type": "array",
                "minItems": 1,
                "items": {
                    "type": "object",
                    "required": ["location", "name", "description"],
                    "properties": {
                        "location": {
                            "type": "string",
                            "description": "querystring, url, header or body",
                        },
                        "name": {"type": "string", "description": "The parameter or field at fault."},
                        "description": {"type": "string", "description": "What is wrong, and what is expected."},
                    },
                },
            },
        },
    }
    return {
        "schemas": {"PageLink": link, "Error": error},
        "headers": {
            "RetryAfter": {
                "description": "Seconds to wait before asking again.",
                "schema": {"type": "string", "pattern": "^[0-9]+$"},
            }
        },
        "responses": {
            "BadRequest": error_response(
                "A bad limit, timeout or feed=longpoll with descending, or a URL that is not UTF-8."
            ),
            "InvalidOffset": error_response("An invalid offset: restart the sync from the newest page."),
            "Unavailable": error_response(
                "The database is unreachable, the query ran past its time limit, or a commit-ordered "
                "feed has no checkpoint yet: retry the same request after Retry-After.",
                retry_after=True,
            ),
        },
    }


def item_schema(fields: Iterable[str], restricted: bool) -> dict[str, Any]:
    """The schema of a feed item: ``id`` and the fields the feed may show."""
    properties: dict[str, Any] = {"id": {"type": "string", "description": "The object's id."}}
    for name in fields:
        properties.setdefault(name, {"description": f"The object's {name} (when it has one)."})
    if restricted:
        properties["restricted"] = {
            "const": True,
            "description": "A restricted object shown to someone but its owner: its other fields are masked.",
        }
    return {"type": "object", "required": ["id"], "properties": properties, "additionalProperties": True}


def operation_id(name: str) -> str:
    """The ``operationId`` of feed ``name`` (letters, digits and ``_``)."""
    return "feed_" + re.sub(r"[^A-Za-z0-9_]", "_", name)


def feed_operation(feed: Any, settings: FeedSettings) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """The path template of a :class:`~.views.FeedDefinition`, its ``GET``
    operation and the page schema it answers with."""
    template, params = path_template(feed.route_path)
    descriptions = {feed.scope: f"The {feed.filter_field} the feed is filtered on."} if feed.scope else {}
    parameters: list[dict[str, Any]] = path_parameters(params, descriptions)
    for name in ("offset", "limit", "descending"):
        parameters.append(ref(name, "parameters"))
    optional = sorted(set(feed.allowed_fields) - set(feed.default_fields))
    parameters.append(
        {
            "name": "opt_fields",
            "in": "query",
            "description": (
                "A comma list of extra fields; names the feed does not allow are dropped. Allowed: "
                + ", ".join(optional)
                + "."
            ),
            "schema": {"type": "string"},
            "examples": {"allowed fields": {"value": ",".join(optional)}},
        }
    )
    for name in ("mode", "feed", "timeout"):
        parameters.append(ref(name, "parameters"))
    page = {
        "type": "object",
        "required": ["data", "next_page"],
        "properties": {
            "data": {
                "type": "array",
                "items": item_schema((*feed.default_fields, *optional), feed.policy.restricted),
                "maxItems": settings.max_limit,
            },
            "next_page": ref("PageLink"),
            "prev_page": {
                **ref("PageLink"),
                "description": "Present when the request had descending or an offset.",
            },
        },
    }
    schema_name = "Page_" + operation_id(feed.name)[len("feed_") :]
    default = ", ".join(feed.default_fields)
    description = (
        f"The {feed.name} feed ({feed.order} order): pages of items with id and {default}, "
        "and the links to the next and previous pages."
    )
    if feed.policy.restricted:
        description += (
            " Restricted objects are shown in full to their owners"
            + (" and to holders of the permission " + repr(feed.policy.restricted_permission))
            * bool(feed.policy.restricted_permission)
            + "; to everyone else as id, restricted, the safe fields and masked placeholders."
        )
    responses: dict[str, Any] = {
        "200": {
            "description": (
                "A page (empty: nothing more for now). Retry-After: a long-poll answered at once "
                "because the server holds as many waiters as it can."
            ),
            "headers": {"Retry-After": ref("RetryAfter", "headers")},
            "content": json_content(ref(schema_name)),
        },
        "400": ref("BadRequest", "responses"),
        "404": ref("InvalidOffset", "responses"),
        "503": ref("Unavailable", "responses"),
    }
    if feed.permission:
        responses["401"] = {"description": f"Not authenticated (the feed needs {feed.permission!r})."}
        responses["403"] = {"description": f"Not permitted (the feed needs {feed.permission!r})."}
    operation = {
        "operationId": operation_id(feed.name),
        "summary": f"The {feed.name} feed",
        "description": description,
        "tags": ["feeds"],
        "parameters": parameters,
        "responses": responses,
    }
    return template, operation, {schema_name: page}


def merge(document: dict[str, Any], part: Mapping[str, Any]) -> None:
    """Merge a partial document into ``document``: paths by path and method,
    components by kind and name, tags appended; anything else set."""
    for key, value in part.items():
        if key == "paths":
            paths = document.setdefault("paths", {})
            for path, item in value.items():
                paths.setdefault(path, {}).update(item)
        elif key == "components":
            components = document.setdefault("components", {})
            for kind, entries in value.items():
                components.setdefault(kind, {}).update(entries)
        elif key == "tags":
            known = {tag["name"] for tag in document.setdefault("tags", [])}
            document["tags"].extend(tag for tag in value if tag["name"] not in known)
        else:
            document[key] = value


def openapi_document(registry: Any, server_url: str | None = None) -> dict[str, Any]:
    """The OpenAPI 3.1 document of the registry's feeds and of what the
    hooks (``config.add_openapi_paths``) add; ``server_url``: the
    application's URL, the document's ``servers`` entry."""
    state = feed_state(registry)
    settings: FeedSettings = state.settings
    components = base_components()
    components["parameters"] = feed_parameters(settings)
    document: dict[str, Any] = {
        "openapi": OPENAPI_VERSION,
        "info": {
            "title": "openprocurement feeds",
            "version": "2.5",
            "description": (
                "Paginated feeds that never lose a document. Sync: ask for ?descending=1, follow "
                "next_page backward to an empty page, then the first page's prev_page and next_page "
                "forward forever. Never parse offsets."
            ),
        },
        "tags": [{"name": "feeds", "description": "The paginated feeds."}],
        "paths": {},
        "components": components,
    }
    if server_url is not None:
        document["servers"] = [{"url": server_url}]
    for feed in state.definitions.values():
        template, operation, schemas = feed_operation(feed, settings)
        merge(document, {"paths": {template: {"get": operation}}, "components": {"schemas": schemas}})
        merge(document, reconcile_part(feed, settings))
    for hook in state.openapi_hooks:
        merge(document, hook(registry))
    return document


def openapi_view(request: Request) -> dict[str, Any]:
    """``GET {route_prefix}/feeds/openapi.json``: the document."""
    return openapi_document(request.registry, request.application_url)


def add_openapi_paths(config: Configurator, hook: OpenAPIHook) -> None:
    """The ``config.add_openapi_paths(hook)`` directive: ``hook(registry)``
    returns a partial OpenAPI document (``paths``, ``components``,
    ``tags``) merged into the served one when it is built."""
    feed_state(config.registry).openapi_hooks.append(hook)


def include_openapi(config: Configurator, settings: FeedSettings) -> None:
    """With ``feed.openapi`` on, register the document's route and view
    (no permission)."""
    if not settings.openapi:
        return
    config.add_route(OPENAPI_ROUTE, openapi_path(settings))
    config.add_view(
        openapi_view, route_name=OPENAPI_ROUTE, renderer="json", request_method="GET", permission=NO_PERMISSION_REQUIRED
    )


__all__ = [
    "OPENAPI_ROUTE",
    "OPENAPI_VERSION",
    "add_openapi_paths",
    "include_openapi",
    "merge",
    "openapi_document",
    "openapi_path",
    "path_template",
]
