"""A feed server's health view read over HTTP, for the ``monitor`` command:
the verdicts parsed into typed records, the URL tried as given or with
``/feeds/health`` appended, and the errors that say why a URL could not be read."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

if TYPE_CHECKING:  # pragma: no cover
    import requests

#: The path the health view has under the API's route prefix.
HEALTH_SUFFIX = "/feeds/health"
#: Verdicts from best to worst, as the health view ranks them.
VERDICTS = ("ok", "unknown", "at-risk", "violated")
#: The --check exit status of each verdict.
EXIT_STATUS = {"ok": 0, "unknown": 1, "at-risk": 1, "violated": 2}
#: HTTP statuses that carry a health body: 503 means a violated promise.
HEALTH_STATUSES = (200, 503)
#: How the live view colours each verdict.


# -- the health body ----------------------------------------------------------


class HealthError(Exception):
    """The URL could not be read as a health view; the message is one line."""


class Unreachable(HealthError):
    """No HTTP answer at all: refused, unknown host, timeout."""


class ServerError(HealthError):
    """An HTTP 5xx answer that is no health view: the server is failing."""


@dataclass(frozen=True)
class Lag:
    """The watcher's start-to-commit lag window (milliseconds)."""

    p50: float | None = None
    p99: float | None = None
    max: float | None = None
    count: int = 0
    window_seconds: float | None = None


@dataclass(frozen=True)
class FeedHealth:
    """One feed of the health body."""

    name: str
    verdict: str
    order: str = ""
    path: str = ""
    watermark_seconds: float | None = None
    reason: str = ""
    watcher_running: bool = False
    watcher_age: float | None = None
    checkpoint_age: float | None = None
    lag: Lag = field(default_factory=Lag)


@dataclass(frozen=True)
class Health:
    """A health body: the overall status, each feed, the view's hint."""

    status: str
    feeds: tuple[FeedHealth, ...]
    hint: str = ""


def _number(raw: Mapping[str, Any], key: str) -> float | None:
    """``raw[key]`` as a float when it is a finite JSON number, else None."""
    value = raw.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _text(raw: Mapping[str, Any], key: str) -> str:
    """``raw[key]`` when it is a string, else ''."""
    value = raw.get(key)
    return value if isinstance(value, str) else ""


def _mapping(raw: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    """``raw[key]`` when it is a JSON object, else an empty one."""
    value = raw.get(key)
    return value if isinstance(value, dict) else {}


def _verdict(value: Any, what: str) -> str:
    """A known verdict, or the shape error that names ``what`` held it."""
    if value not in VERDICTS:
        raise ValueError(f"{what} {value!r} is not one of {', '.join(VERDICTS)}")
    return str(value)


def parse_feed(raw: Any, number: int) -> FeedHealth:
    """One entry of ``feeds``; ValueError says what is missing."""
    if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
        raise ValueError(f"feed #{number + 1} has no 'name'")
    name = raw["name"]
    verdict = _verdict(raw.get("verdict"), f"the verdict of feed {name!r}")
    watcher = _mapping(raw, "watcher")
    lag = _mapping(raw, "lag_ms")
    checkpoint = _mapping(raw, "checkpoint")
    count = _number(lag, "count")
    return FeedHealth(
        name=name,
        verdict=verdict,
        order=_text(raw, "order"),
        path=_text(raw, "path"),
        watermark_seconds=_number(raw, "watermark_seconds"),
        reason=" ".join(_text(raw, "reason").split()),
        watcher_running=watcher.get("running") is True,
        watcher_age=_number(watcher, "age_seconds"),
        checkpoint_age=_number(checkpoint, "age_seconds"),
        lag=Lag(
            p50=_number(lag, "p50"),
            p99=_number(lag, "p99"),
            max=_number(lag, "max"),
            count=int(count or 0),
            window_seconds=_number(lag, "window_seconds"),
        ),
    )


def parse_health(body: Any) -> Health:
    """A :class:`Health` from a JSON body; ValueError when it is not a health view."""
    if not isinstance(body, dict) or not isinstance(body.get("feeds"), list):
        raise ValueError("no 'feeds' list")
    status = _verdict(body.get("status"), "the status")
    feeds = tuple(parse_feed(raw, number) for number, raw in enumerate(body["feeds"]))
    return Health(status, feeds, " ".join(_text(body, "hint").split()))


def overall_status(health: Health) -> str:
    """The body's status, unless a feed's verdict calls for a worse exit status."""
    return max([health.status, *(feed.verdict for feed in health.feeds)], key=EXIT_STATUS.__getitem__)


# -- reading it over HTTP -----------------------------------------------------


def candidate_urls(url: str) -> tuple[str, ...]:
    """The URLs to try, in order: the URL itself when its path ends with
    /feeds/health, else the URL with /feeds/health appended, then as given."""
    parts = urlsplit(url)
    path = parts.path.rstrip("/")
    if path.endswith(HEALTH_SUFFIX):
        return (url,)
    return (urlunsplit(parts._replace(path=path + HEALTH_SUFFIX)), url)


def _http_detail(response: requests.Response) -> str:
    """A short description of an HTTP error answer."""
    try:
        errors = response.json().get("errors") or []
        detail = "; ".join(str(error.get("description", error)) for error in errors)
    except (ValueError, AttributeError, TypeError):
        detail = response.reason or ""
    return " ".join(detail.split())[:200]


def fetch_health(session: requests.Session, url: str, timeout: float) -> Health:
    """GET one health view; every failure is a :class:`HealthError` naming ``url``."""
    import requests

    try:
        response = session.get(url, timeout=timeout, headers={"Accept": "application/json"})
    except requests.Timeout:
        raise Unreachable(f"cannot reach {url}: no answer within {timeout:g} s") from None
    except requests.ConnectionError:
        raise Unreachable(f"cannot reach {url}: the connection failed (refused or unknown host)") from None
    except requests.RequestException as error:
        raise Unreachable(f"cannot reach {url}: {type(error).__name__}: {error}") from None
    code = response.status_code
    failure = ServerError if code >= 500 else HealthError
    if code not in HEALTH_STATUSES:
        detail = _http_detail(response)
        raise failure(f"{url} answered HTTP {code}" + (f": {detail}" if detail else ""))
    answered = (
        f"{url} answered HTTP {code} but not with a health view"
        if code != 200
        else f"{url} did not answer with a health view"
    )
    try:
        body = response.json()
    except ValueError:
        raise failure(f"{answered}: the body is not JSON") from None
    try:
        return parse_health(body)
    except ValueError as error:
        raise failure(f"{answered}: {error}") from None


class HealthSource:
    """The health view behind a URL: finds which candidate URL answers, then
    keeps to it. The next candidate is tried only when one answers, without
    a server error, something that is not a health view (a 404 above all)."""

    def __init__(self, url: str, timeout: float, session: requests.Session | None = None) -> None:
        import requests

        self.candidates = candidate_urls(url)
        self.timeout = timeout
        self.session = session or requests.Session()
        self.resolved: str | None = None

    @property
    def url(self) -> str:
        """The URL in use: the one that answered, else the first to try."""
        return self.resolved or self.candidates[0]

    def fetch(self) -> Health:
        """The current health; :class:`HealthError` when no candidate answers."""
        if self.resolved:
            return fetch_health(self.session, self.resolved, self.timeout)
        errors = []
        for url in self.candidates:
            try:
                health = fetch_health(self.session, url, self.timeout)
            except (Unreachable, ServerError):
                raise
            except HealthError as error:
                errors.append(str(error))
                continue
            self.resolved = url
            return health
        raise HealthError("; ".join(errors))

    def close(self) -> None:
        """Close the HTTP connections."""
        self.session.close()
