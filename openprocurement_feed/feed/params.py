"""Feed query parameters: parsing, validation and the echo used in page links.

Pure functions over a multi-dict of query parameters; nothing here touches the
database or Pyramid, so the rules of the protocol can be read (and tested) in
one place.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..store.offset import InvalidOffset, Offset, parse_offset

INTEGER_RE = re.compile(r"\s*([+-]?)(\d+)\s*", re.ASCII)
#: The ``feed`` value that asks a forward request to wait (SPEC E).
LONGPOLL = "longpoll"


class ParamError(ValueError):
    """A query parameter was rejected: ``name`` and ``description`` go into the
    JSON error body, ``status`` is the HTTP status of the response."""

    def __init__(self, name: str, description: str, status: int = 400) -> None:
        super().__init__(description)
        self.name = name
        self.description = description
        self.status = status


@dataclass(frozen=True)
class FeedParams:
    """What a feed request asked for, validated.

    ``raw_offset`` and ``raw_limit`` keep what the client sent (links echo
    the offset unchanged on an empty page and the clamped limit).
    """

    limit: int
    limit_given: bool = False
    offset: Offset | None = None
    raw_offset: str = ""
    descending: bool = False
    opt_fields: tuple[str, ...] = ()
    mode: str = ""
    #: ``feed=longpoll``: an empty page waits up to ``timeout`` seconds
    longpoll: bool = False
    timeout: float = 0.0
    #: the ``timeout`` the client sent, normalised (echoed in forward links)
    raw_timeout: str = ""

    def link_params(self, offset: str, flip: bool = False) -> dict[str, str]:
        """The query parameters of a page link, in upstream's order: ``mode``,
        ``limit``, ``descending``, ``opt_fields``, then ``offset``; a flipped
        (``prev_page``) link of a forward request appends ``descending``
        after ``opt_fields``, as upstream's does. An empty offset (an empty
        first page) is left out of the query, as upstream leaves it; the
        link's ``offset`` field is still ``""``."""
        params: dict[str, str] = {}
        if self.mode:
            params["mode"] = self.mode
        if self.limit_given:
            params["limit"] = str(self.limit)
        if self.descending and not flip:
            params["descending"] = "1"
        if self.opt_fields:
            params["opt_fields"] = ",".join(self.opt_fields)
        if flip and not self.descending:
            params["descending"] = "1"
        if self.longpoll and not flip:
            # forward links only: a descending long-poll is refused
            params["feed"] = LONGPOLL
            if self.raw_timeout:
                params["timeout"] = self.raw_timeout
        if offset:
            params["offset"] = offset
        return params


def parse_limit(raw: str | None, default: int, maximum: int) -> tuple[int, bool]:
    """``limit``: an integer clamped to ``[1, maximum]``; empty → ``default``."""
    if raw is None or raw == "":
        return default, False
    match = INTEGER_RE.fullmatch(raw)
    if not match:
        raise ParamError("limit", f"Invalid limit provided: {raw}; expected an integer")
    sign, digits = match.groups()
    digits = digits.lstrip("0") or "0"
    if len(digits) > 18:  # far beyond any maximum: clamp without int()
        return (1 if sign == "-" else maximum), True
    return min(max(int(sign + digits), 1), maximum), True


def parse_timeout(raw: str | None, default: float, maximum: float) -> tuple[float, str]:
    """``timeout`` of a long-poll request: seconds in ``[0, maximum]``;
    empty → ``default``. Returns the seconds and the normalised text echoed
    in links (empty when none was given)."""
    if raw is None or raw.strip() == "":
        return default, ""
    allowed = f"expected a number of seconds from 0 to {maximum:g}"
    try:
        seconds = float(raw) if len(raw) <= 32 else math.nan
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds):
        raise ParamError("timeout", f"Invalid timeout provided: {raw[:64]}; {allowed}")
    if not 0 <= seconds <= maximum:
        raise ParamError("timeout", f"Timeout out of range: {raw}; {allowed}")
    return seconds, f"{seconds:g}"


def parse_opt_fields(raw: str | None, allowed: Iterable[str], default: Iterable[str]) -> tuple[str, ...]:
    """``opt_fields``: a comma list intersected with the allowed fields,
    unknown names dropped; sorted, without the feed's default fields."""
    if not raw:
        return ()
    wanted = {name.strip() for name in raw.split(",")}
    return tuple(sorted((wanted & set(allowed)) - set(default)))


def parse_params(
    query: Mapping[str, str],
    *,
    default_limit: int,
    max_limit: int,
    allowed_fields: Iterable[str],
    default_fields: Iterable[str],
    default_timeout: float = 25.0,
    max_timeout: float = 55.0,
) -> FeedParams:
    """Validate the query string of a feed request.

    ``query`` maps a name to its (last) value. Unknown parameters are ignored,
    and so is any ``feed`` value but ``longpoll`` (legacy ``feed=changes``);
    ``timeout`` is read only with ``feed=longpoll``.

    :raises ParamError: for an invalid ``limit`` (400) or ``offset`` (404),
        a bad ``timeout`` or ``feed=longpoll`` with ``descending`` (400).
    """
    limit, limit_given = parse_limit(query.get("limit"), default_limit, max_limit)
    raw_offset = query.get("offset", "") or ""
    offset = None
    if raw_offset:
        try:
            offset = parse_offset(raw_offset, max_count=max_limit)
        except InvalidOffset as error:
            raise ParamError("offset", str(error), status=404) from None
    descending = bool(query.get("descending"))
    longpoll = query.get("feed") == LONGPOLL
    timeout, raw_timeout = 0.0, ""
    if longpoll:
        if descending:
            raise ParamError("feed", "feed=longpoll waits for changes forward; it cannot be combined with descending")
        timeout, raw_timeout = parse_timeout(query.get("timeout"), default_timeout, max_timeout)
    return FeedParams(
        limit=limit,
        limit_given=limit_given,
        offset=offset,
        raw_offset=raw_offset,
        descending=descending,
        opt_fields=parse_opt_fields(query.get("opt_fields"), allowed_fields, default_fields),
        mode=query.get("mode", "") or "",
        longpoll=longpoll,
        timeout=timeout,
        raw_timeout=raw_timeout,
    )
