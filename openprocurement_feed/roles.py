"""The database clients of the system, one per role, each with its own name.

Every client the package opens sends an ``appName`` in its handshake, so
that a database's logs, ``currentOp`` and a fail point's ``appName`` (a drill,
a test) can tell them apart:

* :data:`WEB` — the web application's store (``mongodb.app_name``; an
  ``appname=`` option in ``mongodb.uri`` wins over it);
* :data:`SEQUENCER` — the sequencer's, in process (``feed.sequencer``) or in
  the ``openprocurement-feed sequence`` command (``feed.sequencer_app_name``);
* :data:`LONGPOLL` — the long-poll notifier's (``feed.longpoll_app_name``).

The sequencer and the notifier get a client of their own, on the same URI
and with the same options as the store's, under their role's name (which
replaces any ``appname=`` of the URI). A host that hands its own store to
``config.set_feed_store`` keeps one client: its own, with its own name.
"""

from __future__ import annotations

import re
from typing import Any

from pymongo import MongoClient

#: The web application's client.
WEB = "openprocurement-feed-web"
#: The sequencer's client (in a thread of the web process or in its own).
SEQUENCER = "openprocurement-feed-sequencer"
#: The long-poll notifier's client.
LONGPOLL = "openprocurement-feed-longpoll"
#: Every role's default name, by role.
ROLES = {"web": WEB, "sequencer": SEQUENCER, "longpoll": LONGPOLL}
#: What an ``appName`` set in the ini file may be: the handshake allows
#: 128 bytes; letters, digits and ``._:-`` keep it readable in any log.
APP_NAME_RE = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


def uri_option_names(uri: str) -> set[str]:
    """The lower-cased names of the options written in ``uri``'s query
    string: the settings' defaults must not override them."""
    query = uri.split("?", 1)[1] if "?" in uri else ""
    return {part.split("=", 1)[0].strip().lower() for part in query.replace(";", "&").split("&") if part.strip()}


def client_options(uri: str, app_name: str, timeout_ms: int, role: bool) -> dict[str, Any]:
    """The keyword options of a client of ``uri`` named ``app_name``.

    ``timeout_ms`` bounds server selection and connecting unless the URI
    says otherwise. The web client (``role`` False) takes the URI's
    ``appname`` when it has one; a role's client always carries its own.
    """
    given = uri_option_names(uri)
    defaults: dict[str, Any] = {"serverSelectionTimeoutMS": timeout_ms, "connectTimeoutMS": timeout_ms}
    options = {name: value for name, value in defaults.items() if name.lower() not in given}
    if role or "appname" not in given:
        options["appname"] = app_name
    return options


def open_client(uri: str, app_name: str, timeout_ms: int, role: bool = False, connect: bool = True) -> MongoClient[Any]:
    """A client of ``uri`` named ``app_name`` (:func:`client_options`),
    with timezone-aware dates; ``connect=False`` defers its monitor
    threads and connections to its first command."""
    options = client_options(uri, app_name, timeout_ms, role)
    return MongoClient(uri, tz_aware=True, connect=connect, **options)


def app_name_of(client: MongoClient[Any]) -> str | None:
    """The ``appName`` ``client`` sends in its handshake (None: none)."""
    name = client.options.pool_options.metadata.get("application", {}).get("name")
    return str(name) if name is not None else None


def role_store(registry: Any, app_name: str) -> Any:
    """The store of one role's client, opened once per name and closed by
    :func:`openprocurement_feed.shutdown`: a store like the registry's on a
    client named ``app_name``; the registry's own store when it cannot open
    one (a host's store: its one client)."""
    stores = getattr(registry, "feed_role_stores", None)
    if stores is None:
        stores = registry.feed_role_stores = {}
    if app_name not in stores:
        store = registry.feed_store
        opener = getattr(store, "role_store", None)
        stores[app_name] = opener(app_name) if callable(opener) else store
    return stores[app_name]
