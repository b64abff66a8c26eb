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
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..cli import CommandError
from .healthview import (
    EXIT_STATUS,
    VERDICTS,
    FeedHealth,
    Health,
    HealthError,
    HealthSource,
    overall_status,
)

# the health view's client lives in .healthview; its names are still importable from here
from .healthview import HEALTH_STATUSES as HEALTH_STATUSES
from .healthview import HEALTH_SUFFIX as HEALTH_SUFFIX
from .healthview import Lag as Lag
from .healthview import ServerError as ServerError
from .healthview import Unreachable as Unreachable
from .healthview import candidate_urls as candidate_urls
from .healthview import fetch_health as fetch_health
from .healthview import parse_feed as parse_feed
from .healthview import parse_health as parse_health
from .options import HTTP_TIMEOUT, INTERVAL, RUN_FOR, URL, Flag, add_command, positive_float

if TYPE_CHECKING:  # pragma: no cover
    from rich.console import Console, RenderableType

VERDICT_STYLES = {"ok": "bold green", "unknown": "bold magenta", "at-risk": "bold yellow", "violated": "bold red"}
DEFAULT_INTERVAL = 2.0


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
