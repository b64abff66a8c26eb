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
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from pyramid.exceptions import ConfigurationError

from .roles import LONGPOLL, SEQUENCER, WEB
from .setting_parsers import BOOLEANS as BOOLEANS
from .setting_parsers import CACHE_SIZE_RE as CACHE_SIZE_RE
from .setting_parsers import (
    EMBEDDED_SCHEME,
    READ_CONCERNS,
    check_watermark_length,
    invalid_value,
    parse_app_name,
    parse_bool,
    parse_cache_size,
    parse_choice,
    parse_frame_size_limit,
    parse_max_waiters,
    parse_names,
    parse_non_negative_int,
    parse_non_negative_seconds,
    parse_positive_int,
    parse_positive_seconds,
    parse_read_preference,
    parse_route_prefix,
    parse_timezone,
    parse_uri,
    parse_view_path,
    parse_watermark,
    parse_write_concern,
)
from .setting_parsers import FRAME_SIZE_LIMITS as FRAME_SIZE_LIMITS
from .setting_parsers import LONG_WATERMARK_SECONDS as LONG_WATERMARK_SECONDS
from .setting_parsers import NAME_RE as NAME_RE
from .setting_parsers import READ_PREFERENCES as READ_PREFERENCES
from .setting_parsers import ROUTE_PREFIX_RE as ROUTE_PREFIX_RE
from .setting_parsers import UPSTREAM_READ_PREFERENCES as UPSTREAM_READ_PREFERENCES
from .setting_parsers import load_timezone as load_timezone

log = logging.getLogger(__name__)


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
        "reconcile_feed_limit": Setting("feed.reconcile_feed_limit", "FEED_RECONCILE_FEED_LIMIT", "10000"),
    }
)
#: ``mongodb.*`` keys of upstream-shaped hosts that this package does not
#: read but knows (no "unknown setting" warning for them).
HOST_MONGODB_KEYS = frozenset({"mongodb.max_pool_size", "mongodb.min_pool_size"})
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
    #: with the aggregates on, the most objects the reconcile endpoint reads
    #: from the feed itself while no keeper answers for them (0: no bound)
    reconcile_feed_limit: int = 10_000
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
            raise invalid_value(
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
        raise invalid_value(where, db_name, 'expected a database name without / \\ . " $ or spaces')
    max_limit = parse_positive_int(*raw("max_limit"))
    route_prefix = parse_route_prefix(*raw("route_prefix"))
    default_where, default_value = raw("default_limit")
    default_limit = parse_positive_int(default_where, default_value)
    if default_limit > max_limit:
        raise invalid_value(default_where, default_value, f"expected at most feed.max_limit ({max_limit})")
    long_watermark = parse_bool(*raw("long_watermark"))
    watermark_where, watermark_value = raw("watermark_seconds")
    watermark_seconds = parse_watermark(watermark_where, watermark_value)
    check_watermark_length(watermark_where, watermark_seconds, long_watermark)
    longpoll_max = parse_positive_seconds(*raw("longpoll_max_seconds"))
    longpoll_where, longpoll_value = raw("longpoll_default_seconds")
    longpoll_default = parse_non_negative_seconds(longpoll_where, longpoll_value)
    if longpoll_default > longpoll_max:
        raise invalid_value(
            longpoll_where, longpoll_value, f"expected at most feed.longpoll_max_seconds ({longpoll_max:g})"
        )
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
        reconcile_feed_limit=parse_non_negative_int(*raw("reconcile_feed_limit")),
        embedded_oplog_max_entries=parse_positive_int(*raw("embedded_oplog_max_entries")),
        embedded_oplog_retention_seconds=parse_positive_seconds(*raw("embedded_oplog_retention_seconds")),
        embedded_cache_size=parse_cache_size(*raw("embedded_cache_size")),
    )
