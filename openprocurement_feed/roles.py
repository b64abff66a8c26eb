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

With :data:`COMMAND_LOG_ENV` set to a file's path, every client
:func:`open_client` opens logs its failed commands (and its slow or
write-concern-failed ones) to that file through the driver's command
monitoring (:class:`CommandLog`): the fault matrix counts there, per client
name and whichever process the client lives in, the commands each fault
failed.
"""

from __future__ import annotations

import json
import os
import re
import time
from typing import Any

from pymongo import MongoClient, monitoring

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
#: The environment variable naming the file of :class:`CommandLog` (unset:
#: no listener, no cost).
COMMAND_LOG_ENV = "OPENPROCUREMENT_FEED_COMMAND_LOG"
#: A command that succeeded is logged when it took at least this long (ms).
SLOW_COMMAND_MS = 1000.0


class CommandLog(monitoring.CommandListener):
    """The driver's command monitoring of one client, written to ``path``:
    one JSON line per command that failed (its ``code``, or the ``errtype``
    of a closed connection or a timeout), that succeeded with a
    ``writeConcernError`` (``wce``: its code) or that took at least
    :data:`SLOW_COMMAND_MS`; each with the client's ``app``, the ``pid``,
    the ``command`` and its duration (``ms``).

    Lines are appended (one ``write`` each, short: whole lines however many
    processes share the file); a line that cannot be written is dropped,
    never raised into the driver.
    """

    def __init__(self, path: str, app_name: str) -> None:
        self.path = path
        self.app_name = app_name

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        """Nothing: only outcomes are logged."""

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        """Log a command slow or with a write concern error."""
        milliseconds = event.duration_micros / 1000.0
        concern = event.reply.get("writeConcernError") if isinstance(event.reply, dict) else None
        if concern is None and milliseconds < SLOW_COMMAND_MS:
            return
        self._write(event.command_name, milliseconds, wce=(concern or {}).get("code"))

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        """Log a failed command: its error code, or the error's type."""
        failure = event.failure if isinstance(event.failure, dict) else {}
        concern = failure.get("writeConcernError") or {}
        self._write(
            event.command_name,
            event.duration_micros / 1000.0,
            failed=True,
            code=failure.get("code"),
            errtype=failure.get("errtype"),
            wce=concern.get("code") if isinstance(concern, dict) else None,
        )

    def _write(self, command: str, milliseconds: float, **fields: Any) -> None:
        record = {"app": self.app_name, "pid": os.getpid(), "at": time.time(), "command": command}
        record.update(ms=round(milliseconds, 1), **{name: value for name, value in fields.items() if value is not None})
        try:
            with open(self.path, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(record, default=str) + "\n")
        except OSError:
            pass  # an instrument must not break the client it watches


def command_listeners(app_name: str, environ: Any = None) -> list[CommandLog]:
    """A :class:`CommandLog` for a client named ``app_name`` when
    :data:`COMMAND_LOG_ENV` is set (in ``environ``, by default the
    process's), else none."""
    path = (os.environ if environ is None else environ).get(COMMAND_LOG_ENV)
    return [CommandLog(path, app_name)] if path else []


def uri_option_names(uri: str) -> set[str]:
    """The lower-cased names of the options written in ``uri``'s query
    string: the settings' defaults must not override them."""
    query = uri.split("?", 1)[1] if "?" in uri else ""
    return {part.split("=", 1)[0].strip().lower() for part in query.replace(";", "&").split("&") if part.strip()}


def client_options(uri: str, app_name: str, timeout_ms: int, role: bool) -> dict[str, Any]:
    """The keyword options of a client of ``uri`` named ``app_name``.

    ``timeout_ms`` bounds server selection and connecting unless the URI
    says otherwise. The monitor polls (``serverMonitoringMode=poll``,
    unless the URI says otherwise): after an error that marks the server
    unknown, a polling monitor checks it again at once, where a streaming
    one waits for the server's next answer, up to ``heartbeatFrequencyMS``
    (10 s) of failed selections when no election happened (a fault, a
    blip). The web client (``role`` False) takes the URI's
    ``appname`` when it has one; a role's client always carries its own.
    """
    given = uri_option_names(uri)
    defaults: dict[str, Any] = {
        "serverSelectionTimeoutMS": timeout_ms,
        "connectTimeoutMS": timeout_ms,
        "serverMonitoringMode": "poll",
    }
    options = {name: value for name, value in defaults.items() if name.lower() not in given}
    if role or "appname" not in given:
        options["appname"] = app_name
    return options


def open_client(uri: str, app_name: str, timeout_ms: int, role: bool = False, connect: bool = True) -> MongoClient[Any]:
    """A client of ``uri`` named ``app_name`` (:func:`client_options`),
    with timezone-aware dates; ``connect=False`` defers its monitor
    threads and connections to its first command."""
    options = client_options(uri, app_name, timeout_ms, role)
    listeners = command_listeners(app_name)
    if listeners:
        options["event_listeners"] = listeners
    client: MongoClient[Any] = MongoClient(uri, tz_aware=True, connect=connect, **options)
    for listener in listeners:
        # the name the client sends (the URI's appname wins for the web's)
        listener.app_name = app_name_of(client) or app_name
    return client


def app_name_of(client: MongoClient[Any]) -> str | None:
    """The ``appName`` ``client`` sends in its handshake (None: none)."""
    name = client.options.pool_options.metadata.get("application", {}).get("name")
    return str(name) if name is not None else None
