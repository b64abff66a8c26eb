"""JSON error bodies in the cornice shape and the exception views that use them."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from pymongo.errors import ConnectionFailure, ExecutionTimeout, PyMongoError
from pyramid.config import Configurator
from pyramid.request import Request

from ..save_errors import NotSaved, SaveOutcomeUnknown
from ..store.database import ConflictError
from ..store.orders import FeedNotReady

log = logging.getLogger("openprocurement_feed.errors")  # its name from before the package had subpackages

#: Seconds a client is asked to wait while the database is unreachable.
RETRY_AFTER_SECONDS = 1


def error_body(location: str, name: str, description: str) -> dict[str, Any]:
    """``{"status": "error", "errors": [{location, name, description}]}``."""
    return {
        "status": "error",
        "errors": [{"location": location, "name": name, "description": description}],
    }


def conflict_view(exc: Exception, request: Request) -> dict[str, Any]:
    """409 for a write whose ``_rev`` was stale."""
    request.response.status = 409
    return error_body("body", "data", f"Conflict: {exc}; re-read and retry")


@dataclass(frozen=True)
class RetryLaterView:
    """The exception view of one member of the 503/504 family: the
    request's failure is logged (no traceback to the client), and the client
    is answered ``status`` with ``Retry-After`` and a JSON error named
    ``name``."""

    #: The response's status (503: retry; 504: the outcome is unknown).
    status: int
    #: The log line's opening words.
    what: str
    #: The error's name in the body.
    name: str
    #: The error's description in the body (None: the exception's text).
    description: str | None = None
    #: Whether the log line names the exception's class.
    typed: bool = False

    def __call__(self, exc: Exception, request: Request) -> dict[str, Any]:
        detail = f"{type(exc).__name__}: {exc}" if self.typed else exc
        log.warning("%s for %s %s: %s", self.what, request.method, request.path, detail)
        request.response.status = self.status
        request.response.headers["Retry-After"] = str(RETRY_AFTER_SECONDS)
        return error_body("body", self.name, str(exc) if self.description is None else self.description)


#: The 503/504 family: each exception class and its view (the most
#: specific class's view answers).
RETRY_LATER_VIEWS: tuple[tuple[type[Exception], RetryLaterView], ...] = (
    # any other database error (a refused or interrupted command): the
    # client retries, the log has the error
    (
        PyMongoError,
        RetryLaterView(503, "Database error", "database", "The database could not answer; retry later", typed=True),
    ),
    # the database cannot be reached
    (
        ConnectionFailure,
        RetryLaterView(503, "Database unavailable", "database", "The database is unavailable; retry later"),
    ),
    # a write the database did not make: nothing was stored, retry it
    (
        NotSaved,
        RetryLaterView(
            503,
            "Write not saved",
            "not_saved",
            "The database did not save the change; nothing was written, retry it",
        ),
    ),
    # a write the database did not confirm: it may have been applied
    (
        SaveOutcomeUnknown,
        RetryLaterView(
            504,
            "Write outcome unknown",
            "outcome_unknown",
            "The database did not confirm the change: it may have been saved. Read the object again before "
            "changing it; retry a create with the same Idempotency-Key header, which answers the object if "
            "it was created",
        ),
    ),
    # a feed query that ran past ``feed.max_time_ms``
    (
        ExecutionTimeout,
        RetryLaterView(503, "Query over its time limit", "database", "The query took too long; retry later"),
    ),
    # a commit-ordered feed before its first checkpoint (SPEC D.6)
    (FeedNotReady, RetryLaterView(503, "Feed not ready", "feed")),
)


def add_error_views(config: Configurator) -> None:
    """Register the exception views: 409 for a stale write, the 503/504
    family (:data:`RETRY_LATER_VIEWS`)."""
    config.add_view(conflict_view, context=ConflictError, renderer="json")
    for context, view in RETRY_LATER_VIEWS:
        config.add_view(view, context=context, renderer="json")
