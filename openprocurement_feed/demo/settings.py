"""Settings of the demo application (``demo.*``)."""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pyramid.exceptions import ConfigurationError

DELAY_RE = re.compile(r"\s*(\d{1,6})\s*(?:-\s*(\d{1,6})\s*)?", re.ASCII)


@dataclass(frozen=True)
class DemoSettings:
    """``write_delay_ms``: the ``(low, high)`` range of milliseconds a write
    stays open after its stamp before it commits; ``(0, 0)`` commits at once."""

    write_delay_ms: tuple[int, int] = (0, 0)
    #: also serve the tenders in the other feed order, at ``tenders-{order}``
    both_orders: bool = False
    #: the auth file of the demo's users (a path or ``package:path``); None
    #: keeps writes open (:mod:`.auth`)
    auth_file: str | None = None
    #: how long an ``Idempotency-Key`` is kept (s; :mod:`.idempotency`)
    idempotency_ttl_seconds: int = 86_400


@dataclass
class DemoStats:
    """Counters of the demo's write path, shared by its request threads:
    ``conflicts`` counts transactions retried after a transient error (a
    write conflict with another transaction)."""

    conflicts: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def conflict(self) -> None:
        with self.lock:
            self.conflicts += 1


def parse_delay(value: str, where: str = "setting 'demo.write_delay_ms'") -> tuple[int, int]:
    """``"0"``, ``"20"`` or a range ``"5-40"`` (milliseconds, low <= high)."""
    match = DELAY_RE.fullmatch(value or "0")
    if not match:
        raise ConfigurationError(f"Invalid {where}: {value!r}; expected milliseconds such as 0, 20 or 5-40.")
    low = int(match.group(1))
    high = int(match.group(2)) if match.group(2) is not None else low
    if high < low:
        raise ConfigurationError(f"Invalid {where}: {value!r}; the range must go from low to high.")
    return low, high


def parse_flag(value: Any, where: str) -> bool:
    """``true``/``false`` (also yes/no, on/off, 1/0); anything else is an error."""
    text = str(value).strip().lower()
    if text in ("true", "yes", "on", "1"):
        return True
    if text in ("false", "no", "off", "0", ""):
        return False
    raise ConfigurationError(f"Invalid {where}: {value!r}; expected true or false.")


#: The longest key expiry (s): MongoDB's ``expireAfterSeconds`` is a 32-bit integer.
MAX_TTL_SECONDS = 2_147_483_647


def parse_ttl(value: Any, where: str = "setting 'demo.idempotency_ttl_seconds'") -> int:
    """A whole number of seconds from 1 to :data:`MAX_TTL_SECONDS`."""
    text = str(value).strip()
    if not text.isdigit() or not 1 <= int(text) <= MAX_TTL_SECONDS:
        raise ConfigurationError(
            f"Invalid {where}: {value!r}; expected whole seconds from 1 to {MAX_TTL_SECONDS} (86400: a day)."
        )
    return int(text)


def parse_demo_settings(settings: Mapping[str, Any], environ: Mapping[str, str]) -> DemoSettings:
    """Read ``demo.write_delay_ms`` (env ``DEMO_WRITE_DELAY_MS`` overrides),
    ``demo.both_orders``, ``demo.auth_file`` (the file itself is read by
    :func:`.auth.read_auth_file`) and ``demo.idempotency_ttl_seconds`` (env
    ``DEMO_IDEMPOTENCY_TTL_SECONDS`` overrides)."""
    if environ.get("DEMO_WRITE_DELAY_MS"):
        delay = parse_delay(environ["DEMO_WRITE_DELAY_MS"], "environment variable DEMO_WRITE_DELAY_MS")
    else:
        delay = parse_delay(str(settings.get("demo.write_delay_ms", "0") or "0"))
    both = parse_flag(settings.get("demo.both_orders", "false"), "setting 'demo.both_orders'")
    auth_file = settings.get("demo.auth_file")
    if auth_file is not None and not isinstance(auth_file, str):
        raise ConfigurationError(f"Invalid setting 'demo.auth_file': {auth_file!r}; expected a file path.")
    if environ.get("DEMO_IDEMPOTENCY_TTL_SECONDS"):
        ttl = parse_ttl(environ["DEMO_IDEMPOTENCY_TTL_SECONDS"], "environment variable DEMO_IDEMPOTENCY_TTL_SECONDS")
    else:
        ttl = parse_ttl(settings.get("demo.idempotency_ttl_seconds", "86400"))
    return DemoSettings(delay, both, (auth_file or "").strip() or None, ttl)
