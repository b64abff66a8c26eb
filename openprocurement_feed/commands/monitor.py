"""``openprocurement-feed monitor URL``: watch a feed's promise through its health view.

URL is the health view (``{route_prefix}/feeds/health``, e.g.
http://127.0.0.1:6543/api/2.5/feeds/health) or the API's base URL (e.g.
http://127.0.0.1:6543/api/2.5): when the path does not end with
/feeds/health, that is appended first, and the URL as given is tried next
(for a health view on a path of its own, feed.health_path).

Without --check: a live terminal view, refreshed every --interval seconds,
with one row per feed (order, W, verdict, start-to-commit lag, checkpoint and
watcher age, the view's reason). It keeps retrying while the URL cannot be
read and shows why. Ctrl-C (or the end of --for) stops it with a one-line
summary; exit status 0. With stdout not a terminal only the last screen is
printed, so 'monitor URL --for 5 > screen.txt' captures one.

With --check: one request and a one-line summary on stdout, for cron and
alerting. Exit status: 0 ok; 1 at-risk or unknown (the promise cannot be
confirmed); 2 violated, or the URL could not be read as a health view
(unreachable, an HTTP status other than 200 and 503, a body that is not JSON
or not a health view).
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from ..cli import CommandError
from .options import HTTP_TIMEOUT, INTERVAL, RUN_FOR, URL, Flag, add_command, positive_float

if TYPE_CHECKING:  # pragma: no cover
    import requests
    from rich.console import Console, RenderableType

#: The path the health view has under the API's route prefix.
HEALTH_SUFFIX = "/feeds/health"
#: Verdicts from best to worst, as the health view ranks them.
VERDICTS = ("ok", "unknown", "at-risk", "violated")
#: The --check exit status of each verdict.
EXIT_STATUS = {"ok": 0, "unknown": 1, "at-risk": 1, "violated": 2}
#: HTTP statuses that carry a health body: 503 means a violated promise.
HEALTH_STATUSES = (200, 503)
#: How the live view colours each verdict.
VERDICT_STYLES = {"ok": "bold green", "unknown": "bold magenta", "at-risk": "bold yellow", "violated": "bold red"}
DEFAULT_INTERVAL = 2.0


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


# -- text ---------------------------------------------------------------------


def format_ms(value: float | None) -> str:
    """Milliseconds for a person: whole from 10 ms up, one decimal below."""
    if value is None:
        return "–"
    text = f"{value:.0f}" if abs(value) >= 10 else f"{value:.1f}"
    return text[:-2] if text.endswith(".0") else text


def format_age(seconds: float | None) -> str:
    """An age or a duration: '0.4 s', '3 min 04 s', '2 h 05 min'."""
    if seconds is None:
        return "–"
    if seconds < 60:
        return f"{seconds:.1f} s"
    whole = int(seconds)
    if whole < 3600:
        return f"{whole // 60} min {whole % 60:02d} s"
    return f"{whole // 3600} h {whole % 3600 // 60:02d} min"


def _first_clause(reason: str) -> str:
    """The view's reason up to its first ': ' (the finding, not the advice)."""
    return reason.split(": ", 1)[0]


def feed_detail(feed: FeedHealth) -> str:
    """Why a feed has its verdict, in a few words."""
    lag, w = feed.lag, feed.watermark_seconds
    w_ms = w * 1000 if w else None
    if feed.verdict == "unknown" and not feed.watcher_running:
        return "no watcher running"
    if feed.order != "commit" and w_ms and lag.count and lag.max is not None:
        if feed.verdict == "violated" and lag.max >= w_ms:
            return f"max lag {format_ms(lag.max)} ms >= W {format_ms(w_ms)} ms"
        if feed.verdict == "at-risk" and lag.max > w_ms / 2:
            return f"max lag {format_ms(lag.max)} ms > W/2 {format_ms(w_ms / 2)} ms"
        if feed.verdict == "ok" and lag.p99 is not None:
            return f"lag p99 {format_ms(lag.p99)} ms / W {format_ms(w_ms)} ms"
    if feed.order == "commit" and feed.verdict == "ok" and feed.checkpoint_age is not None:
        return f"checkpoint {format_age(feed.checkpoint_age)} old"
    return _first_clause(feed.reason) or "no reason given"


def summary_line(health: Health) -> str:
    """The --check line: ``STATUS: feed verdict (detail), ...``."""
    feeds = ", ".join(f"{feed.name} {feed.verdict} ({feed_detail(feed)})" for feed in health.feeds)
    return f"{overall_status(health)}: {feeds or 'no feeds'}"


# -- --check ------------------------------------------------------------------


def run_check(args: argparse.Namespace) -> int:
    """One request, one line on stdout, the exit status of the status."""
    try:
        source = HealthSource(args.url, args.timeout)
    except ImportError as error:
        raise CommandError(
            f"needs the client extra ({error.name} is missing): pip install 'openprocurement_feed[client]'"
        ) from None
    try:
        health = source.fetch()
    except HealthError as error:
        raise CommandError(str(error)) from None
    finally:
        source.close()
    print(summary_line(health), flush=True)
    return EXIT_STATUS[overall_status(health)]


# -- the live view ------------------------------------------------------------


@dataclass
class MonitorState:
    """What the live view knows: the last answer, the last error, counts."""

    interval: float
    started: float = field(default_factory=time.monotonic)
    health: Health | None = None
    answered_at: float | None = None
    error: str | None = None
    requests: int = 0
    failures: int = 0
    worst: str | None = None

    def record(self, source: HealthSource) -> None:
        """Make one request and keep its outcome."""
        self.requests += 1
        try:
            health = source.fetch()
        except HealthError as error:
            self.failures += 1
            self.error = str(error)
            return
        self.health, self.answered_at, self.error = health, time.monotonic(), None
        status = overall_status(health)
        self.worst = status if self.worst is None else max((self.worst, status), key=VERDICTS.index)

    @property
    def status(self) -> str:
        """The current status; 'connecting' before the first answer and
        'unreachable' while the last request failed."""
        if not self.requests:
            return "connecting"
        if self.error or self.health is None:
            return "unreachable"
        return overall_status(self.health)

    def summary(self) -> str:
        """The line printed when the view stops."""
        elapsed = format_age(time.monotonic() - self.started)
        last = self.status + (f" ({self.error})" if self.error else "")
        worst = f", worst seen {self.worst}" if self.worst else ""
        return (
            f"monitor: stopped after {elapsed}: {self.requests} requests, "
            f"{self.failures} failed; last status {last}{worst}"
        )


def _verdict_text(verdict: str) -> Any:
    """A verdict in its colour."""
    from rich.text import Text

    return Text(verdict, style=VERDICT_STYLES.get(verdict, "bold red"))


#: Below this many columns the table has no borders.
COMPACT_WIDTH = 110
#: From this many columns on the reasons are a column of the table; below,
#: one line each under it.
REASON_COLUMN_WIDTH = 140
#: The columns before the reason: header, justification.
COLUMNS = (
    ("feed", "left"),
    ("order", "left"),
    ("W", "right"),
    ("verdict", "left"),
    ("p50", "right"),
    ("p99", "right"),
    ("max", "right"),
    ("count", "right"),
    ("ckpt", "right"),
    ("watcher", "right"),
)


def feed_row(feed: FeedHealth) -> list[Any]:
    """The table cells of one feed, the reason last; all of them Text, so
    that brackets in what the server sent are not taken for markup."""
    from rich.text import Text

    lag = feed.lag
    watcher = format_age(feed.watcher_age) if feed.watcher_age is not None else "none"
    w = "–" if feed.watermark_seconds is None else f"{feed.watermark_seconds:g} s"
    return [
        Text(feed.name),
        Text(feed.order or "–"),
        Text(w),
        _verdict_text(feed.verdict),
        Text(format_ms(lag.p50)),
        Text(format_ms(lag.p99)),
        Text(format_ms(lag.max)),
        Text(str(lag.count)),
        Text(format_age(feed.checkpoint_age)),
        Text(watcher, style="" if feed.watcher_running else "bold red"),
        Text(feed.reason),
    ]


def table_caption(health: Health) -> str:
    """What the columns are: lag units and window, what the ages are of."""
    windows = sorted({feed.lag.window_seconds for feed in health.feeds if feed.lag.window_seconds})
    over = f" over the last {', '.join(format_age(seconds) for seconds in windows)}" if windows else ""
    return (
        f"p50/p99/max: start-to-commit lag in ms, count: samples{over}; "
        "ckpt, watcher: age of the checkpoint and of the watcher's figures (red: not running)"
    )


def feed_table(health: Health, stale: bool, width: int) -> Any:
    """The table of every feed, laid out for ``width`` columns; dimmed when
    it is an old answer."""
    from rich import box
    from rich.table import Table

    reasons_inline = width >= REASON_COLUMN_WIDTH
    compact = width < COMPACT_WIDTH
    table = Table(
        box=box.SIMPLE_HEAD if compact else box.HEAVY_HEAD,
        show_edge=not compact,
        pad_edge=not compact,
        padding=(0, 1, 0, 0) if compact else (0, 1),
        expand=reasons_inline,
        style="dim" if stale else "",
        header_style="bold",
        caption=table_caption(health),
        caption_justify="left",
        caption_style="dim",
    )
    for name, justify in COLUMNS:
        table.add_column(name, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    if reasons_inline:
        table.add_column("reason", ratio=1, overflow="fold", min_width=20)
    for feed in health.feeds:
        cells = feed_row(feed)
        table.add_row(*(cells if reasons_inline else cells[:-1]))
    return table


def reason_lines(health: Health) -> Any:
    """Each feed's reason on a line of its own, for narrow terminals."""
    from rich.text import Text

    text = Text()
    for number, feed in enumerate(health.feeds):
        if number:
            text.append("\n")
        text.append(f"{feed.name}: ", style="bold")
        text.append(feed.reason or "no reason given")
    return text


def header(state: MonitorState, url: str) -> Any:
    """The line above the table: status, URL, time, refresh interval."""
    from rich.text import Text

    status = state.status
    line = Text()
    line.append(f" {status.upper()} ", style="reverse " + VERDICT_STYLES.get(status, "bold red"))
    line.append(f"  {url}  ", style="bold")
    line.append(datetime.now().strftime("%Y-%m-%d %H:%M:%S"))
    line.append(f"  every {state.interval:g} s", style="dim")
    return line


def render(state: MonitorState, url: str, width: int) -> RenderableType:
    """The whole screen for ``width`` columns: header, error while failing,
    table, reasons (when not in the table), hint."""
    from rich.console import Group
    from rich.text import Text

    parts: list[Any] = [header(state, url)]
    if state.error:
        since = (
            "no answer yet"
            if state.answered_at is None
            else f"last answer {format_age(time.monotonic() - state.answered_at)} ago"
        )
        parts.append(Text(f"{state.error} (retrying every {state.interval:g} s; {since})", style="bold red"))
    if state.health is not None:
        if state.health.feeds:
            parts.append(feed_table(state.health, state.error is not None, width))
            if width < REASON_COLUMN_WIDTH:
                parts.append(reason_lines(state.health))
        else:
            parts.append(Text("The health view lists no feed.", style="dim"))
        hint = state.health.hint
        if hint and not any(hint in feed.reason for feed in state.health.feeds):
            parts.append(Text(hint, style="dim"))
    return Group(*parts)


def make_console() -> Console:
    """The console of the live view, on stdout."""
    from rich.console import Console

    return Console(highlight=False)


def run_live(args: argparse.Namespace) -> int:
    """Refresh the view every --interval seconds until Ctrl-C or --for."""
    try:
        from rich.live import Live

        source = HealthSource(args.url, args.timeout)
    except ImportError as error:
        raise CommandError(
            f"the live view needs the client extra ({error.name} is missing): "
            "pip install 'openprocurement_feed[client]'"
        ) from None
    state = MonitorState(args.interval or DEFAULT_INTERVAL)
    deadline = state.started + args.run_for if args.run_for else None
    console = make_console()
    try:
        with Live(render(state, source.url, console.width), console=console, auto_refresh=False) as live:
            while True:
                tick = time.monotonic()
                state.record(source)
                live.update(render(state, source.url, console.width), refresh=True)
                now = time.monotonic()
                if deadline is not None and now >= deadline:
                    break
                pause = state.interval - (now - tick)
                if deadline is not None:
                    pause = min(pause, deadline - now)
                time.sleep(max(0.0, pause))
    except KeyboardInterrupt:
        pass
    finally:
        source.close()
    if not console.is_terminal:
        console.line()  # the last screen, printed at the end, has no newline of its own
    print(state.summary(), flush=True)
    return 0


# -- the command --------------------------------------------------------------


#: The line in ``openprocurement-feed --help``.
HELP = "watch the feeds' health view live, or check it once for cron and alerting"
#: The command's flags, shared ones from :mod:`.options` first where they apply.
FLAGS = (
    URL.but(
        help="the health view, e.g. http://127.0.0.1:6543/api/2.5/feeds/health, or the API's "
        "base URL, e.g. http://127.0.0.1:6543/api/2.5 (/feeds/health is appended)"
    ),
    Flag(
        "--check",
        action="store_true",
        help="one request and a one-line summary; exit status 0 ok, 1 at-risk or unknown, 2 violated or not readable",
    ),
    INTERVAL.but(
        type=positive_float,
        default=None,
        help=f"live view: seconds between two refreshes (default: {DEFAULT_INTERVAL:g})",
    ),
    RUN_FOR.but(help="live view: stop by itself after S seconds (default: until Ctrl-C)"),
    HTTP_TIMEOUT.but(default=5.0),
)


def add_parser(subparsers: Any) -> None:
    """Register ``monitor`` and its flags."""
    add_command(subparsers, "monitor", run, __doc__, help=HELP, flags=FLAGS)


def run(args: argparse.Namespace) -> int:
    """Check once with --check, else show the live view; the exit status."""
    if args.check:
        for flag, value in (("--interval", args.interval), ("--for", args.run_for)):
            if value is not None:
                raise CommandError(f"{flag} is for the live view; --check makes one request")
        return run_check(args)
    return run_live(args)
