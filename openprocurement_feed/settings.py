"""Typed settings of the feed extension, parsed once from the Pyramid registry.

Every setting lives in the ini file under a prefix (``mongodb.*`` or
``feed.*``) and can be overridden by an environment variable. Parsing is a set
of pure functions: :func:`parse_settings` takes the settings mapping and an
environment mapping and returns a frozen :class:`FeedSettings`, or raises a
:class:`pyramid.exceptions.ConfigurationError` that names the setting, the
value it got and what is allowed.
"""

from __future__ import annotations

import difflib
import logging
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timezone, tzinfo
from functools import cache
from types import MappingProxyType
from typing import Any, TypeVar
from zoneinfo import ZoneInfo

from pyramid.exceptions import ConfigurationError

from .roles import APP_NAME_RE, LONGPOLL, SEQUENCER, WEB

T = TypeVar("T")
log = logging.getLogger(__name__)

READ_PREFERENCES = (
    "primary",
    "primaryPreferred",
    "secondary",
    "secondaryPreferred",
    "nearest",
)
#: Upstream openprocurement.api names a read preference by its attribute of
#: pymongo's ``ReadPreference`` (``SECONDARY_PREFERRED``, its default).
UPSTREAM_READ_PREFERENCES = {
    "PRIMARY": "primary",
    "PRIMARY_PREFERRED": "primaryPreferred",
    "SECONDARY": "secondary",
    "SECONDARY_PREFERRED": "secondaryPreferred",
    "NEAREST": "nearest",
}
READ_CONCERNS = ("local", "available", "majority", "linearizable", "snapshot")
EMBEDDED_SCHEME = "embedded://"
ROUTE_PREFIX_RE = re.compile(r"^(/[A-Za-z0-9._~-]+)*$")
#: The embedded server's cache: megabytes or gigabytes, ``64M``, ``1G``.
CACHE_SIZE_RE = re.compile(r"^([1-9][0-9]{0,5})([MG])$", re.IGNORECASE)
NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class Setting:
    """One known setting: its ini key, its environment variable, its default,
    and whether an empty ini value means something (else it is an error)."""

    key: str
    env: str
    default: str | None
    empty_ok: bool = False
    #: further environment variables read when ``env`` is not set (upstream
    #: openprocurement.api's names for the same setting)
    env_aliases: tuple[str, ...] = ()


SETTINGS: Mapping[str, Setting] = MappingProxyType(
    {
        "uri": Setting("mongodb.uri", "MONGODB_URI", None),
        "db_name": Setting("mongodb.db_name", "DB_NAME", "openprocurement"),
        "read_preference": Setting(
            "mongodb.read_preference", "MONGODB_READ_PREFERENCE", "primary", env_aliases=("READ_PREFERENCE",)
        ),
        "write_concern": Setting(
            "mongodb.write_concern", "MONGODB_WRITE_CONCERN", "majority", env_aliases=("WRITE_CONCERN",)
        ),
        "read_concern": Setting("mongodb.read_concern", "MONGODB_READ_CONCERN", "local", env_aliases=("READ_CONCERN",)),
        "server_selection_timeout_ms": Setting(
            "mongodb.server_selection_timeout_ms",
            "MONGODB_SERVER_SELECTION_TIMEOUT_MS",
            "5000",
        ),
        "app_name": Setting("mongodb.app_name", "MONGODB_APP_NAME", WEB),
        "sequencer_app_name": Setting("feed.sequencer_app_name", "FEED_SEQUENCER_APP_NAME", SEQUENCER),
        "longpoll_app_name": Setting("feed.longpoll_app_name", "FEED_LONGPOLL_APP_NAME", LONGPOLL),
        "watermark_seconds": Setting("feed.watermark_seconds", "FEED_WATERMARK_SECONDS", "1"),
        "route_prefix": Setting("feed.route_prefix", "FEED_ROUTE_PREFIX", "/api/2.5", empty_ok=True),
        "default_limit": Setting("feed.default_limit", "FEED_DEFAULT_LIMIT", "100"),
        "max_limit": Setting("feed.max_limit", "FEED_MAX_LIMIT", "1000"),
        "resources": Setting("feed.resources", "FEED_RESOURCES", "", empty_ok=True),
        "max_time_ms": Setting("feed.max_time_ms", "FEED_MAX_TIME_MS", "0"),
        "order": Setting("feed.order", "FEED_ORDER", "watermark"),
        "sequencer": Setting("feed.sequencer", "FEED_SEQUENCER", "off"),
        "health_path": Setting("feed.health_path", "FEED_HEALTH_PATH", "{route_prefix}/feeds/health"),
        "health_permission": Setting("feed.health_permission", "FEED_HEALTH_PERMISSION", "", empty_ok=True),
        "lag_window_seconds": Setting("feed.lag_window_seconds", "FEED_LAG_WINDOW_SECONDS", "300"),
        "checkpoint_threshold_seconds": Setting(
            "feed.checkpoint_threshold_seconds", "FEED_CHECKPOINT_THRESHOLD_SECONDS", "5"
        ),
        "metrics_path": Setting("feed.metrics_path", "FEED_METRICS_PATH", "", empty_ok=True),
        "metrics_permission": Setting("feed.metrics_permission", "FEED_METRICS_PERMISSION", "", empty_ok=True),
        "long_watermark": Setting("feed.long_watermark", "FEED_LONG_WATERMARK", "false"),
        "longpoll_default_seconds": Setting("feed.longpoll_default_seconds", "FEED_LONGPOLL_DEFAULT_SECONDS", "25"),
        "longpoll_max_seconds": Setting("feed.longpoll_max_seconds", "FEED_LONGPOLL_MAX_SECONDS", "55"),
        "longpoll_max_waiters": Setting("feed.longpoll_max_waiters", "FEED_LONGPOLL_MAX_WAITERS", "auto"),
        "openapi": Setting("feed.openapi", "FEED_OPENAPI", "true"),
        "timezone": Setting("feed.timezone", "FEED_TIMEZONE", "Europe/Kyiv"),
        "reconcile_aggregates": Setting("feed.reconcile_aggregates", "FEED_RECONCILE_AGGREGATES", "true"),
        "embedded_oplog_max_entries": Setting(
            "mongodb.embedded_oplog_max_entries", "MONGODB_EMBEDDED_OPLOG_MAX_ENTRIES", "20000"
        ),
        "embedded_oplog_retention_seconds": Setting(
            "mongodb.embedded_oplog_retention_seconds", "MONGODB_EMBEDDED_OPLOG_RETENTION_SECONDS", "3600"
        ),
        "embedded_cache_size": Setting("mongodb.embedded_cache_size", "MONGODB_EMBEDDED_CACHE_SIZE", "64M"),
        "reconcile_frame_size_limit": Setting(
            "feed.reconcile_frame_size_limit", "FEED_RECONCILE_FRAME_SIZE_LIMIT", "500000"
        ),
    }
)
#: The longest watermark accepted without ``feed.long_watermark = true``.
LONG_WATERMARK_SECONDS = 3600.0
#: ``mongodb.*`` keys of upstream-shaped hosts that this package does not
#: read but knows (no "unknown setting" warning for them).
HOST_MONGODB_KEYS = frozenset({"mongodb.max_pool_size", "mongodb.min_pool_size"})
BOOLEANS = {"true": True, "yes": True, "on": True, "1": True, "false": False, "no": False, "off": False, "0": False}
#: The feed orders (SPEC D): by ``public_modified`` behind a watermark, or by commit.
ORDERS = ("watermark", "commit")
#: Where the sequencer of commit-ordered feeds runs: elsewhere, or in a thread
#: here; ``observe`` runs the same follower in a thread that only measures
#: (for watermark deployments).
SEQUENCER_MODES = ("off", "thread", "observe")
#: The long-poll waiters per process when neither the setting nor the
#: server's thread count says more.
DEFAULT_MAX_WAITERS = 4


@dataclass(frozen=True)
class FeedSettings:
    """The parsed, validated settings of the extension.

    ``collections`` maps a feed name to its collection name; names without an
    explicit ``mongodb.<name>_collection`` use the feed name itself.
    """

    uri: str
    db_name: str = "openprocurement"
    read_preference: str = "primary"
    write_concern: str | int = "majority"
    read_concern: str = "local"
    server_selection_timeout_ms: int = 5000
    #: the ``appName`` of each role's client (:mod:`.roles`); an ``appname``
    #: in ``uri`` wins over ``app_name`` (the web client's)
    app_name: str = WEB
    sequencer_app_name: str = SEQUENCER
    longpoll_app_name: str = LONGPOLL
    watermark_seconds: float = 1.0
    route_prefix: str = "/api/2.5"
    default_limit: int = 100
    max_limit: int = 1000
    resources: tuple[str, ...] = ()
    max_time_ms: int = 0
    collections: Mapping[str, str] = field(default_factory=dict)
    order: str = "watermark"
    sequencer: str = "off"
    health_path: str = "/api/2.5/feeds/health"
    health_permission: str | None = None
    lag_window_seconds: float = 300.0
    checkpoint_threshold_seconds: float = 5.0
    metrics_path: str = ""
    metrics_permission: str | None = None
    long_watermark: bool = False
    #: ``feed=longpoll`` (SPEC E): the wait without ``timeout``, the longest
    #: ``timeout`` accepted, and the waiters per process (None: half the
    #: server's threads where known, else :data:`DEFAULT_MAX_WAITERS`)
    longpoll_default_seconds: float = 25.0
    longpoll_max_seconds: float = 55.0
    longpoll_max_waiters: int | None = None
    #: serve the OpenAPI document at ``{route_prefix}/feeds/openapi.json``
    openapi: bool = True
    #: the zone naive datetimes of listed fields are written in (they are
    #: UTC): upstream's renderer writes them in its ``TZ``, Europe/Kiev
    timezone: str = "Europe/Kyiv"
    #: the followers keep the reconciliation aggregates (SPEC G.3)
    reconcile_aggregates: bool = True
    #: the largest reconcile message the endpoint reads or answers (bytes)
    reconcile_frame_size_limit: int = 500_000
    #: the bounds of the embedded server (``embedded://`` only): its oplog's
    #: entries and age, and its storage engine's cache
    embedded_oplog_max_entries: int = 20_000
    embedded_oplog_retention_seconds: float = 3600.0
    embedded_cache_size: str = "64M"

    @property
    def embedded(self) -> bool:
        """True when the URI asks for the embedded development server."""
        return self.uri.startswith(EMBEDDED_SCHEME)

    @property
    def embedded_path(self) -> str | None:
        """The data folder of the embedded server, or None for a throwaway one."""
        if not self.embedded:
            return None
        return self.uri[len(EMBEDDED_SCHEME) :] or None

    @property
    def embedded_args(self) -> tuple[str, ...]:
        """The ``secantusd-py`` flags of the embedded server's bounds."""
        return (
            "--oplog-max-entries",
            str(self.embedded_oplog_max_entries),
            "--oplog-retention-seconds",
            f"{self.embedded_oplog_retention_seconds:g}",
            "--cache-size",
            self.embedded_cache_size,
        )

    def collection_name(self, name: str) -> str:
        """The collection that stores the documents of feed ``name``."""
        return self.collections.get(name, name)

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> FeedSettings:
        """Parse ``settings`` (a Pyramid settings mapping) with env overrides."""
        return parse_settings(settings, environ)


def _raw(name: str, settings: Mapping[str, Any], environ: Mapping[str, str]) -> tuple[str, str | None]:
    """Return ``(where, value)`` for a setting: the env var wins over the ini."""
    spec = SETTINGS[name]
    for variable in (spec.env, *spec.env_aliases):
        if environ.get(variable, "") != "":
            return f"environment variable {variable}", environ[variable]
    value = settings.get(spec.key)
    if value is None:
        return f"setting {spec.key!r}", spec.default
    if str(value).strip() == "":
        if spec.empty_ok:
            # an empty value is a value: "off", "none", or (feed.route_prefix)
            # no prefix of the feed's own
            return f"setting {spec.key!r}", ""
        allowed = f"remove the line for the default ({spec.default})" if spec.default else "set a value"
        raise ConfigurationError(f"Empty setting {spec.key!r}; {allowed}.")
    return f"setting {spec.key!r}", str(value).strip()


def _fail(where: str, value: Any, allowed: str) -> ConfigurationError:
    return ConfigurationError(f"Invalid {where}: {value!r}; {allowed}.")


def _number(parse: Callable[[str], T], where: str, value: str, allowed: str) -> T:
    try:
        return parse(value)
    except (TypeError, ValueError):
        raise _fail(where, value, allowed) from None


def parse_uri(where: str, value: str | None) -> str:
    """Validate the database URI: a ``mongodb://`` or ``mongodb+srv://`` URI,
    or ``embedded://`` (optionally ``embedded:///data/dir``)."""
    if not value:
        raise ConfigurationError(
            f"Missing {where}: set mongodb.uri in the ini file or the MONGODB_URI "
            "environment variable to a mongodb:// URI, or to embedded:// for the "
            "embedded development server."
        )
    if value.startswith(EMBEDDED_SCHEME):
        return value
    if not (value.startswith("mongodb://") or value.startswith("mongodb+srv://")):
        raise _fail(where, value, "expected a mongodb:// or mongodb+srv:// URI, or embedded://")
    return value


def parse_app_name(where: str, value: str) -> str:
    """A client's ``appName``: 1 to 128 letters, digits or ``._:-``."""
    if not APP_NAME_RE.match(value):
        raise _fail(where, value, "expected 1 to 128 letters, digits or . _ : - (the client's appName)")
    return value


def parse_watermark(where: str, value: str) -> float:
    """The watermark in seconds: a finite float >= 0 (0 disables it)."""
    return parse_non_negative_seconds(where, value, "expected a number of seconds >= 0 (0 disables the watermark)")


def parse_bool(where: str, value: str) -> bool:
    """``true``/``false`` (also ``yes``/``no``, ``on``/``off``, ``1``/``0``)."""
    if value.lower() not in BOOLEANS:
        raise _fail(where, value, "expected true or false")
    return BOOLEANS[value.lower()]


def check_watermark_length(where: str, seconds: float, long_ok: bool) -> None:
    """Refuse a watermark above an hour unless ``feed.long_watermark`` says
    it is meant (a typo in milliseconds would hide the feed for days)."""
    if seconds > LONG_WATERMARK_SECONDS and not long_ok:
        raise _fail(
            where,
            seconds,
            f"a watermark above {LONG_WATERMARK_SECONDS:.0f} seconds hides every document that "
            "long; set feed.long_watermark = true if you mean it",
        )


def unknown_keys(settings: Mapping[str, Any]) -> list[tuple[str, str | None]]:
    """The ``feed.*`` and ``mongodb.*`` keys of ``settings`` this package
    does not know, each with the closest known key (or None)."""
    known = {spec.key for spec in SETTINGS.values()}
    found = []
    for key in settings:
        if not isinstance(key, str) or not key.startswith(("feed.", "mongodb.")):
            continue
        if key in known or key in HOST_MONGODB_KEYS:
            continue
        if key.startswith("mongodb.") and key.endswith("_collection"):
            continue
        close = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.6)
        found.append((key, close[0] if close else None))
    return found


def warn_unknown_keys(settings: Mapping[str, Any]) -> None:
    """Log a warning for each unknown ``feed.*``/``mongodb.*`` key."""
    for key, close in unknown_keys(settings):
        hint = f"; did you mean {close!r}?" if close else ""
        log.warning("Unknown setting %r is ignored%s", key, hint)


def parse_positive_int(where: str, value: str, upper: int | None = None) -> int:
    """An integer >= 1 (and <= ``upper`` when given)."""
    allowed = "expected an integer >= 1" + (f" and <= {upper}" if upper else "")
    number = _number(int, where, value, allowed)
    if number < 1 or (upper is not None and number > upper):
        raise _fail(where, value, allowed)
    return number


def parse_non_negative_int(where: str, value: str) -> int:
    """An integer >= 0."""
    allowed = "expected an integer >= 0 (0 means no limit)"
    number = _number(int, where, value, allowed)
    if number < 0:
        raise _fail(where, value, allowed)
    return number


def parse_write_concern(where: str, value: str) -> str | int:
    """``majority``, a tag set name, or a non-negative number of nodes."""
    if value.isdigit():
        return int(value)
    if not value or not NAME_RE.match(value.replace("-", "_")):
        raise _fail(where, value, "expected 'majority', a number of nodes or a tag set name")
    return value


def parse_choice(where: str, value: str, choices: tuple[str, ...]) -> str:
    """One of ``choices``, exactly."""
    if value not in choices:
        raise _fail(where, value, "expected one of " + ", ".join(choices))
    return value


def parse_read_preference(where: str, value: str) -> str:
    """A read preference mode: the driver's name (``secondaryPreferred``) or
    upstream's ``ReadPreference`` attribute name (``SECONDARY_PREFERRED``),
    returned as the driver's name."""
    if value in UPSTREAM_READ_PREFERENCES:
        return UPSTREAM_READ_PREFERENCES[value]
    if value not in READ_PREFERENCES:
        raise _fail(
            where,
            value,
            "expected one of "
            + ", ".join(READ_PREFERENCES)
            + " (or upstream's spelling: "
            + ", ".join(UPSTREAM_READ_PREFERENCES)
            + ")",
        )
    return value


def parse_route_prefix(where: str, value: str) -> str:
    """A URL path prefix such as ``/api/2.5`` (no trailing slash).

    Empty (or ``/``) is a real value: the feeds get no prefix of their own,
    for a host whose ``Configurator(route_prefix=...)`` already puts one
    before every route it adds (the include's routes among them).
    """
    prefix = value.rstrip("/")
    if not ROUTE_PREFIX_RE.match(prefix):
        raise _fail(where, value, "expected a path such as /api/2.5")
    return prefix


@cache
def load_timezone(name: str) -> tzinfo:
    """The zone called ``name`` (``Europe/Kyiv``, ``UTC``);
    :class:`zoneinfo.ZoneInfoNotFoundError` (a :class:`KeyError`) for an
    unknown name."""
    if name.upper() == "UTC":
        return timezone.utc
    return ZoneInfo(name)


def parse_timezone(where: str, value: str) -> str:
    """An IANA time zone name (``Europe/Kyiv``, ``UTC``) known to
    :mod:`zoneinfo` (the system's zone database, or the ``tzdata``
    package)."""
    try:
        load_timezone(value)
    except (KeyError, ValueError, OSError):
        raise _fail(
            where,
            value,
            "expected a time zone name such as Europe/Kyiv or UTC (from the system's zone database "
            "or the tzdata package)",
        ) from None
    return value


def parse_non_negative_seconds(where: str, value: str, allowed: str = "expected a number of seconds >= 0") -> float:
    """A finite number of seconds >= 0 (``allowed``: what the error says is expected)."""
    seconds = _number(float, where, value, allowed)
    if not math.isfinite(seconds) or seconds < 0:
        raise _fail(where, value, allowed)
    return seconds


def parse_cache_size(where: str, value: str) -> str:
    """A storage engine cache size: whole megabytes or gigabytes (``64M``,
    ``1G``), at least 16 MB."""
    match = CACHE_SIZE_RE.match(value)
    megabytes = 0 if match is None else int(match.group(1)) * (1024 if match.group(2).upper() == "G" else 1)
    if match is None or megabytes < 16:
        raise _fail(where, value, "expected megabytes or gigabytes such as 64M or 1G, at least 16M")
    return value.upper()


def parse_max_waiters(where: str, value: str) -> int | None:
    """``auto`` (None: derived from the server's threads) or an integer >= 0
    (0: every long-poll request is answered at once)."""
    if value.lower() == "auto":
        return None
    allowed = "expected auto or an integer >= 0"
    number = _number(int, where, value, allowed)
    if number < 0:
        raise _fail(where, value, allowed)
    return number


#: The smallest frame size limit Negentropy allows, and the largest accepted here.
FRAME_SIZE_LIMITS = (4096, 100_000_000)


def parse_frame_size_limit(where: str, value: str) -> int:
    """A reconcile frame size limit in bytes: 4096 to 100,000,000."""
    low, high = FRAME_SIZE_LIMITS
    number = _number(int, where, value, f"expected a number of bytes from {low} to {high}")
    if not low <= number <= high:
        raise _fail(where, value, f"expected a number of bytes from {low} to {high}")
    return number


def parse_positive_seconds(where: str, value: str) -> float:
    """A finite number of seconds > 0."""
    allowed = "expected a number of seconds > 0"
    seconds = _number(float, where, value, allowed)
    if not math.isfinite(seconds) or seconds <= 0:
        raise _fail(where, value, allowed)
    return seconds


def parse_view_path(where: str, value: str, route_prefix: str, optional: bool = False) -> str:
    """A URL path such as ``/api/2.5/feeds/health``; ``{route_prefix}`` is
    replaced by the feed's route prefix. With ``optional``, empty means off."""
    path = (value or "").replace("{route_prefix}", route_prefix)
    if optional and not path:
        return ""
    if not path.startswith("/") or not ROUTE_PREFIX_RE.match(path.rstrip("/")) or path == "/":
        raise _fail(where, value, "expected a path such as /api/2.5/feeds/health")
    return path.rstrip("/")


def parse_names(where: str, value: str) -> tuple[str, ...]:
    """A whitespace- or comma-separated list of feed names."""
    names = tuple(n for n in re.split(r"[\s,]+", value or "") if n)
    for name in names:
        if not NAME_RE.match(name):
            raise _fail(where, name, "expected feed names made of letters, digits and _")
    if len(set(names)) != len(names):
        raise _fail(where, value, "expected each feed name once")
    return names


def parse_collections(settings: Mapping[str, Any], environ: Mapping[str, str]) -> dict[str, str]:
    """Collect ``mongodb.<name>_collection`` settings (env ``MONGODB_<NAME>_COLLECTION``)."""
    found: dict[str, str] = {}
    for key, value in settings.items():
        if key.startswith("mongodb.") and key.endswith("_collection"):
            found[key[len("mongodb.") : -len("_collection")]] = str(value).strip()
    for key, value in environ.items():
        if key.startswith("MONGODB_") and key.endswith("_COLLECTION") and value:
            found[key[len("MONGODB_") : -len("_COLLECTION")].lower()] = value.strip()
    for name, collection in found.items():
        if not collection or "$" in collection or "\x00" in collection:
            raise _fail(
                f"setting 'mongodb.{name}_collection'",
                collection,
                "expected a collection name without '$'",
            )
    return found


def parse_settings(settings: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> FeedSettings:
    """Build :class:`FeedSettings` from a settings mapping and an environment.

    :raises pyramid.exceptions.ConfigurationError: for a missing or bad value.
    """
    env: Mapping[str, str] = environ if environ is not None else {}
    warn_unknown_keys(settings)

    def raw(name: str) -> tuple[str, str]:
        where, value = _raw(name, settings, env)
        return where, value  # type: ignore[return-value]

    uri = parse_uri(*_raw("uri", settings, env))
    where, db_name = raw("db_name")
    if not db_name or any(c in db_name for c in '/\\. "$\x00'):
        raise _fail(where, db_name, 'expected a database name without / \\ . " $ or spaces')
    max_limit = parse_positive_int(*raw("max_limit"))
    route_prefix = parse_route_prefix(*raw("route_prefix"))
    default_where, default_value = raw("default_limit")
    default_limit = parse_positive_int(default_where, default_value)
    if default_limit > max_limit:
        raise _fail(default_where, default_value, f"expected at most feed.max_limit ({max_limit})")
    long_watermark = parse_bool(*raw("long_watermark"))
    watermark_where, watermark_value = raw("watermark_seconds")
    watermark_seconds = parse_watermark(watermark_where, watermark_value)
    check_watermark_length(watermark_where, watermark_seconds, long_watermark)
    longpoll_max = parse_positive_seconds(*raw("longpoll_max_seconds"))
    longpoll_where, longpoll_value = raw("longpoll_default_seconds")
    longpoll_default = parse_non_negative_seconds(longpoll_where, longpoll_value)
    if longpoll_default > longpoll_max:
        raise _fail(longpoll_where, longpoll_value, f"expected at most feed.longpoll_max_seconds ({longpoll_max:g})")
    return FeedSettings(
        uri=uri,
        long_watermark=long_watermark,
        db_name=db_name,
        read_preference=parse_read_preference(*raw("read_preference")),
        write_concern=parse_write_concern(*raw("write_concern")),
        read_concern=parse_choice(*raw("read_concern"), READ_CONCERNS),
        server_selection_timeout_ms=parse_positive_int(*raw("server_selection_timeout_ms"), upper=600_000),
        app_name=parse_app_name(*raw("app_name")),
        sequencer_app_name=parse_app_name(*raw("sequencer_app_name")),
        longpoll_app_name=parse_app_name(*raw("longpoll_app_name")),
        watermark_seconds=watermark_seconds,
        route_prefix=route_prefix,
        default_limit=default_limit,
        max_limit=max_limit,
        resources=parse_names(*raw("resources")),
        max_time_ms=parse_non_negative_int(*raw("max_time_ms")),
        collections=parse_collections(settings, env),
        order=parse_choice(*raw("order"), ORDERS),
        sequencer=parse_choice(*raw("sequencer"), SEQUENCER_MODES),
        health_path=parse_view_path(*raw("health_path"), route_prefix),
        health_permission=raw("health_permission")[1] or None,
        lag_window_seconds=parse_positive_seconds(*raw("lag_window_seconds")),
        checkpoint_threshold_seconds=parse_positive_seconds(*raw("checkpoint_threshold_seconds")),
        metrics_path=parse_view_path(*raw("metrics_path"), route_prefix, optional=True),
        metrics_permission=raw("metrics_permission")[1] or None,
        longpoll_default_seconds=longpoll_default,
        longpoll_max_seconds=longpoll_max,
        longpoll_max_waiters=parse_max_waiters(*raw("longpoll_max_waiters")),
        openapi=parse_bool(*raw("openapi")),
        timezone=parse_timezone(*raw("timezone")),
        reconcile_aggregates=parse_bool(*raw("reconcile_aggregates")),
        reconcile_frame_size_limit=parse_frame_size_limit(*raw("reconcile_frame_size_limit")),
        embedded_oplog_max_entries=parse_positive_int(*raw("embedded_oplog_max_entries")),
        embedded_oplog_retention_seconds=parse_positive_seconds(*raw("embedded_oplog_retention_seconds")),
        embedded_cache_size=parse_cache_size(*raw("embedded_cache_size")),
    )
