"""The parsers of single setting values, for :mod:`.settings`.

Each takes where the value came from (a setting's name or an environment
variable's, for the message) and the value, and returns it parsed, or
raises a :class:`pyramid.exceptions.ConfigurationError` that names the
setting, the value it got and what is allowed. :mod:`.settings` reads the
settings mapping and the environment and builds the typed settings from
them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from datetime import timezone, tzinfo
from functools import cache
from typing import Any, TypeVar
from zoneinfo import ZoneInfo

from pyramid.exceptions import ConfigurationError

from .roles import APP_NAME_RE

T = TypeVar("T")

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
#: The longest watermark accepted without ``feed.long_watermark = true``.
LONG_WATERMARK_SECONDS = 3600.0
BOOLEANS = {"true": True, "yes": True, "on": True, "1": True, "false": False, "no": False, "off": False, "0": False}


def invalid_value(where: str, value: Any, allowed: str) -> ConfigurationError:
    """The error of an invalid value: where it came from, the value, what is allowed."""
    return ConfigurationError(f"Invalid {where}: {value!r}; {allowed}.")


def _number(parse: Callable[[str], T], where: str, value: str, allowed: str) -> T:
    try:
        return parse(value)
    except (TypeError, ValueError):
        raise invalid_value(where, value, allowed) from None


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
        raise invalid_value(where, value, "expected a mongodb:// or mongodb+srv:// URI, or embedded://")
    return value


def parse_app_name(where: str, value: str) -> str:
    """A client's ``appName``: 1 to 128 letters, digits or ``._:-``."""
    if not APP_NAME_RE.match(value):
        raise invalid_value(where, value, "expected 1 to 128 letters, digits or . _ : - (the client's appName)")
    return value


def parse_watermark(where: str, value: str) -> float:
    """The watermark in seconds: a finite float >= 0 (0 disables it)."""
    return parse_non_negative_seconds(where, value, "expected a number of seconds >= 0 (0 disables the watermark)")


def parse_bool(where: str, value: str) -> bool:
    """``true``/``false`` (also ``yes``/``no``, ``on``/``off``, ``1``/``0``)."""
    if value.lower() not in BOOLEANS:
        raise invalid_value(where, value, "expected true or false")
    return BOOLEANS[value.lower()]


def check_watermark_length(where: str, seconds: float, long_ok: bool) -> None:
    """Refuse a watermark above an hour unless ``feed.long_watermark`` says
    it is meant (a typo in milliseconds would hide the feed for days)."""
    if seconds > LONG_WATERMARK_SECONDS and not long_ok:
        raise invalid_value(
            where,
            seconds,
            f"a watermark above {LONG_WATERMARK_SECONDS:.0f} seconds hides every document that "
            "long; set feed.long_watermark = true if you mean it",
        )


def parse_positive_int(where: str, value: str, upper: int | None = None) -> int:
    """An integer >= 1 (and <= ``upper`` when given)."""
    allowed = "expected an integer >= 1" + (f" and <= {upper}" if upper else "")
    number = _number(int, where, value, allowed)
    if number < 1 or (upper is not None and number > upper):
        raise invalid_value(where, value, allowed)
    return number


def parse_non_negative_int(where: str, value: str) -> int:
    """An integer >= 0."""
    allowed = "expected an integer >= 0 (0 means no limit)"
    number = _number(int, where, value, allowed)
    if number < 0:
        raise invalid_value(where, value, allowed)
    return number


def parse_write_concern(where: str, value: str) -> str | int:
    """``majority``, a tag set name, or a non-negative number of nodes."""
    if value.isdigit():
        return int(value)
    if not value or not NAME_RE.match(value.replace("-", "_")):
        raise invalid_value(where, value, "expected 'majority', a number of nodes or a tag set name")
    return value


def parse_choice(where: str, value: str, choices: tuple[str, ...]) -> str:
    """One of ``choices``, exactly."""
    if value not in choices:
        raise invalid_value(where, value, "expected one of " + ", ".join(choices))
    return value


def parse_read_preference(where: str, value: str) -> str:
    """A read preference mode: the driver's name (``secondaryPreferred``) or
    upstream's ``ReadPreference`` attribute name (``SECONDARY_PREFERRED``),
    returned as the driver's name."""
    if value in UPSTREAM_READ_PREFERENCES:
        return UPSTREAM_READ_PREFERENCES[value]
    if value not in READ_PREFERENCES:
        raise invalid_value(
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
        raise invalid_value(where, value, "expected a path such as /api/2.5")
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
        raise invalid_value(
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
        raise invalid_value(where, value, allowed)
    return seconds


def parse_cache_size(where: str, value: str) -> str:
    """A storage engine cache size: whole megabytes or gigabytes (``64M``,
    ``1G``), at least 16 MB."""
    match = CACHE_SIZE_RE.match(value)
    megabytes = 0 if match is None else int(match.group(1)) * (1024 if match.group(2).upper() == "G" else 1)
    if match is None or megabytes < 16:
        raise invalid_value(where, value, "expected megabytes or gigabytes such as 64M or 1G, at least 16M")
    return value.upper()


def parse_max_waiters(where: str, value: str) -> int | None:
    """``auto`` (None: derived from the server's threads) or an integer >= 0
    (0: every long-poll request is answered at once)."""
    if value.lower() == "auto":
        return None
    allowed = "expected auto or an integer >= 0"
    number = _number(int, where, value, allowed)
    if number < 0:
        raise invalid_value(where, value, allowed)
    return number


#: The smallest frame size limit Negentropy allows, and the largest accepted here.
FRAME_SIZE_LIMITS = (4096, 100_000_000)


def parse_frame_size_limit(where: str, value: str) -> int:
    """A reconcile frame size limit in bytes: 4096 to 100,000,000."""
    low, high = FRAME_SIZE_LIMITS
    number = _number(int, where, value, f"expected a number of bytes from {low} to {high}")
    if not low <= number <= high:
        raise invalid_value(where, value, f"expected a number of bytes from {low} to {high}")
    return number


def parse_positive_seconds(where: str, value: str) -> float:
    """A finite number of seconds > 0."""
    allowed = "expected a number of seconds > 0"
    seconds = _number(float, where, value, allowed)
    if not math.isfinite(seconds) or seconds <= 0:
        raise invalid_value(where, value, allowed)
    return seconds


def parse_view_path(where: str, value: str, route_prefix: str, optional: bool = False) -> str:
    """A URL path such as ``/api/2.5/feeds/health``; ``{route_prefix}`` is
    replaced by the feed's route prefix. With ``optional``, empty means off."""
    path = (value or "").replace("{route_prefix}", route_prefix)
    if optional and not path:
        return ""
    if not path.startswith("/") or not ROUTE_PREFIX_RE.match(path.rstrip("/")) or path == "/":
        raise invalid_value(where, value, "expected a path such as /api/2.5/feeds/health")
    return path.rstrip("/")


def parse_names(where: str, value: str) -> tuple[str, ...]:
    """A whitespace- or comma-separated list of feed names."""
    names = tuple(n for n in re.split(r"[\s,]+", value or "") if n)
    for name in names:
        if not NAME_RE.match(name):
            raise invalid_value(where, name, "expected feed names made of letters, digits and _")
    if len(set(names)) != len(names):
        raise invalid_value(where, value, "expected each feed name once")
    return names
