"""Settings of the demo application (``demo.*``)."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping

from pyramid.exceptions import ConfigurationError

DELAY_RE = re.compile(r"\s*(\d{1,6})\s*(?:-\s*(\d{1,6})\s*)?", re.ASCII)


@dataclass(frozen=True)
class DemoSettings:
    """``write_delay_ms``: the ``(low, high)`` range of milliseconds a write
    stays open after its stamp before it commits; ``(0, 0)`` commits at once."""

    write_delay_ms: tuple[int, int] = (0, 0)


def parse_delay(value: str, where: str = "setting 'demo.write_delay_ms'") -> tuple[int, int]:
    """``"0"``, ``"20"`` or a range ``"5-40"`` (milliseconds, low <= high)."""
    match = DELAY_RE.fullmatch(value or "0")
    if not match:
        raise ConfigurationError(
            f"Invalid {where}: {value!r}; expected milliseconds such as 0, 20 or 5-40."
        )
    low = int(match.group(1))
    high = int(match.group(2)) if match.group(2) is not None else low
    if high < low:
        raise ConfigurationError(
            f"Invalid {where}: {value!r}; the range must go from low to high."
        )
    return low, high


def parse_demo_settings(settings: Mapping[str, Any], environ: Mapping[str, str]) -> DemoSettings:
    """Read ``demo.write_delay_ms`` (env ``DEMO_WRITE_DELAY_MS`` overrides)."""
    if environ.get("DEMO_WRITE_DELAY_MS"):
        return DemoSettings(
            parse_delay(environ["DEMO_WRITE_DELAY_MS"], "environment variable DEMO_WRITE_DELAY_MS")
        )
    return DemoSettings(parse_delay(str(settings.get("demo.write_delay_ms", "0") or "0")))
