"""JSON error bodies in the cornice shape and the exception views that use them."""

from __future__ import annotations

import logging
from typing import Any

from pyramid.request import Request

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


def database_unavailable_view(exc: Exception, request: Request) -> dict[str, Any]:
    """503 while the database cannot be reached (no traceback to the client)."""
    log.warning("Database unavailable for %s %s: %s", request.method, request.path, exc)
    request.response.status = 503
    request.response.headers["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return error_body("body", "database", "The database is unavailable; retry later")


def query_timeout_view(exc: Exception, request: Request) -> dict[str, Any]:
    """503 for a feed query that ran past ``feed.max_time_ms``."""
    log.warning("Query over its time limit for %s %s: %s", request.method, request.path, exc)
    request.response.status = 503
    request.response.headers["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return error_body("body", "database", "The query took too long; retry later")


def feed_not_ready_view(exc: Exception, request: Request) -> dict[str, Any]:
    """503 for a commit-ordered feed before its first checkpoint (SPEC D.6)."""
    log.warning("Feed not ready for %s %s: %s", request.method, request.path, exc)
    request.response.status = 503
    request.response.headers["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return error_body("body", "feed", str(exc))


def database_error_view(exc: Exception, request: Request) -> dict[str, Any]:
    """503 for any other database error (a refused or interrupted command,
    a time limit): the client retries, the log has the error."""
    log.warning("Database error for %s %s: %s: %s", request.method, request.path, type(exc).__name__, exc)
    request.response.status = 503
    request.response.headers["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return error_body("body", "database", "The database could not answer; retry later")


def not_saved_view(exc: Exception, request: Request) -> dict[str, Any]:
    """503 for a write the database did not make
    (:class:`~.save_errors.NotSaved`): nothing was stored, retry it."""
    log.warning("Write not saved for %s %s: %s", request.method, request.path, exc)
    request.response.status = 503
    request.response.headers["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return error_body("body", "not_saved", "The database did not save the change; nothing was written, retry it")


def outcome_unknown_view(exc: Exception, request: Request) -> dict[str, Any]:
    """504 for a write the database did not confirm
    (:class:`~.save_errors.SaveOutcomeUnknown`): it may have been applied."""
    log.warning("Write outcome unknown for %s %s: %s", request.method, request.path, exc)
    request.response.status = 504
    request.response.headers["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return error_body(
        "body",
        "outcome_unknown",
        "The database did not confirm the change: it may have been saved. Read the object again before "
        "changing it; retry a create with the same Idempotency-Key header, which answers the object if "
        "it was created",
    )
