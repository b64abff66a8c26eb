"""Argument types shared by the subcommands: each rejects bad values with a
message that names what was wrong (argparse adds the flag's name)."""
from __future__ import annotations

import argparse
import math
from urllib.parse import urlsplit

from pyramid.exceptions import ConfigurationError


def _int_at_least(value: str, low: int) -> int:
    try:
        number = int(value)
    except ValueError:
        number = low - 1
    if number < low:
        raise argparse.ArgumentTypeError(f"expected an integer >= {low}, got {value!r}")
    return number


def positive_int(value: str) -> int:
    """An integer >= 1."""
    return _int_at_least(value, 1)


def non_negative_int(value: str) -> int:
    """An integer >= 0."""
    return _int_at_least(value, 0)


def non_negative_float(value: str) -> float:
    """A finite number >= 0."""
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {value!r}") from None
    if not math.isfinite(number) or number < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {value!r}")
    return number


def positive_float(value: str) -> float:
    """A finite number > 0."""
    number = non_negative_float(value)
    if number == 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {value!r}")
    return number


def watermark_seconds(value: str) -> float:
    """A watermark in seconds (0 disables it)."""
    return non_negative_float(value)


def port_number(value: str) -> int:
    """A TCP port, 1-65535."""
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number 1-65535, got {value!r}") from None
    if not 1 <= number <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port number 1-65535, got {value!r}")
    return number


def http_url(value: str) -> str:
    """An http:// or https:// URL with a host."""
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise argparse.ArgumentTypeError(f"expected an http:// or https:// URL, got {value!r}")
    return value


def delay_range(value: str) -> str:
    """Milliseconds a write stays open after its stamp: ``0``, ``20`` or ``5-40``."""
    from ..demo.settings import parse_delay  # the demo's own rule, one place

    try:
        parse_delay(value, "write delay")
    except ConfigurationError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return value
