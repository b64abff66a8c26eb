"""The ``monitor`` command against canned health views on a real loopback
HTTP server: ``--check`` exit statuses and summary lines for each verdict and
each kind of bad answer, the base-URL form, the live view's screen."""

from __future__ import annotations

import _thread
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from openprocurement_feed.cli import main as cli_main
from openprocurement_feed.commands.healthview import candidate_urls, parse_health
from openprocurement_feed.commands.monitor import format_age, format_ms

HOW_TO_WATCH = "No watcher runs: start 'openprocurement-feed sequence --observe CONFIG.ini'."
REASONS = {
    "ok": "max start-to-commit lag 37 ms is below half of W (500 ms)",
    "at-risk": "max start-to-commit lag 640 ms > W/2 (500 ms)",
    "violated": "max start-to-commit lag 1210 ms >= W (1000 ms): a write may have been skipped by crawlers; raise W",
}
LAGS = {
    "ok": {"p50": 12.0, "p99": 35.0, "max": 37.0, "count": 4210, "window_seconds": 300.0},
    "at-risk": {"p50": 20.0, "p99": 410.0, "max": 640.0, "count": 812, "window_seconds": 300.0},
    "violated": {"p50": 25.0, "p99": 900.0, "max": 1210.0, "count": 97, "window_seconds": 300.0},
}


def feed(verdict: str, name: str = "tenders", **fields: Any) -> dict[str, Any]:
    """One feed of a health body in the given state."""
    running = verdict != "unknown"
    body: dict[str, Any] = {
        "name": name,
        "path": f"/api/2.5/{name}",
        "collection": name,
        "order": "watermark",
        "watermark_seconds": 1.0,
        "verdict": verdict,
        "reason": REASONS.get(verdict, HOW_TO_WATCH),
        "watcher": {
            "running": running,
            "updated": "2026-12-02T17:00:00.123000+00:00" if running else None,
            "age_seconds": 1.2 if running else None,
        },
        "checkpoint": None,
        "lag_ms": LAGS.get(verdict, {"p50": None, "p99": None, "max": None, "count": 0, "window_seconds": None}),
    }
    body.update(fields)
    return body


def health(*feeds: dict[str, Any]) -> dict[str, Any]:
    """A health body over ``feeds``, its status the worst verdict."""
    order = ("ok", "unknown", "at-risk", "violated")
    body: dict[str, Any] = {
        "status": max((f["verdict"] for f in feeds), key=order.index, default="unknown"),
        "feeds": list(feeds),
    }
    if any(not f["watcher"]["running"] for f in feeds):
        body["hint"] = HOW_TO_WATCH
    return body


def json_answer(body: Any, status: int = 200) -> tuple[int, str, bytes]:
    return status, "application/json", json.dumps(body).encode()


COMMIT_OK = feed(
    "ok",
    "plans",
    order="commit",
    watermark_seconds=1.0,
    reason="the sequencer keeps up",
    checkpoint={"position": "1796229504.0000000012", "age_seconds": 0.4, "uncovered_seconds": 0.0},
)
COMMIT_STALLED = feed(
    "at-risk",
    "plans",
    order="commit",
    checkpoint={"position": "1796229504.0000000012", "age_seconds": 42.0},
    reason="the checkpoint is 41 s behind the newest write (threshold 5 s): is the sequencer running?",
)

#: path -> the answers it gives, in turn (the last one repeated).
ROUTES: dict[str, list[tuple[int, str, bytes]]] = {
    "/ok/feeds/health": [json_answer(health(feed("ok")))],
    "/at-risk/feeds/health": [json_answer(health(feed("at-risk")))],
    "/unknown/feeds/health": [json_answer(health(feed("unknown")))],
    "/violated/feeds/health": [json_answer(health(feed("violated")), 503)],
    "/two/feeds/health": [json_answer(health(feed("ok"), COMMIT_OK))],
    "/stalled/feeds/health": [json_answer(health(feed("ok"), COMMIT_STALLED))],
    "/empty/feeds/health": [json_answer({"status": "unknown", "feeds": []})],
    "/text/feeds/health": [(200, "text/html", b"<html>It works!</html>")],
    "/other/feeds/health": [json_answer({"data": [], "next_page": {"offset": ""}})],
    "/badverdict/feeds/health": [json_answer({"status": "ok", "feeds": [feed("great")]})],
    "/broken/feeds/health": [json_answer({"errors": [{"description": "Internal error"}]}, 500)],
    "/proxy/feeds/health": [(503, "text/html", b"<html>Service Unavailable</html>")],
    "/api/2.5/feeds/health": [json_answer(health(feed("ok")))],
    "/status": [json_answer(health(feed("ok")))],
    "/flaky/feeds/health": [(502, "text/plain", b"bad gateway")] * 2 + [json_answer(health(feed("at-risk")))],
    "/flip/feeds/health": [json_answer(health(feed("ok"))), (500, "text/plain", b"oops")],
    "/brackets/feeds/health": [json_answer(health(feed("ok", "[/bold]t[red]", reason="lag [/] [b]37[/b] ms")))],
}


class HealthServer(ThreadingHTTPServer):
    """Serves :data:`ROUTES`, counting the requests each path got; a path
    of :attr:`interrupt_at` interrupts the main thread (as Ctrl-C does) on
    that request, before it is answered: a live view in the main thread
    stops having shown the answers before it (and perhaps that one),
    whatever the machine's speed."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), HealthHandler)
        self.hits: dict[str, int] = {}
        self.interrupt_at: dict[str, int] = {}
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def answer(self, path: str) -> tuple[int, str, bytes]:
        answers = ROUTES.get(path)
        if answers is None:
            return json_answer({"errors": [{"description": "Not Found"}]}, 404)
        with self.lock:
            hit = self.hits.get(path, 0)
            self.hits[path] = hit + 1
        if self.interrupt_at.get(path) == hit + 1:
            _thread.interrupt_main()  # raised in the main thread once it runs again: on this answer
        return answers[min(hit, len(answers) - 1)]


class HealthHandler(BaseHTTPRequestHandler):
    server: HealthServer

    def do_GET(self) -> None:
        status, content_type, body = self.server.answer(self.path.split("?", 1)[0])
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass


@pytest.fixture
def server() -> Iterator[HealthServer]:
    """The canned health views on loopback, in a thread."""
    running = HealthServer()
    thread = threading.Thread(target=running.serve_forever, daemon=True)
    thread.start()
    yield running
    running.shutdown()
    running.server_close()
    thread.join(5)


def check(url: str, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str, str]:
    """``monitor URL --check``: exit status, stdout, stderr."""
    status = cli_main(["monitor", url, "--check", *extra])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


# -- --check --------------------------------------------------------------------


@pytest.mark.parametrize(
    "state, status, line",
    [
        ("ok", 0, "ok: tenders ok (lag p99 35 ms / W 1000 ms)"),
        ("at-risk", 1, "at-risk: tenders at-risk (max lag 640 ms > W/2 500 ms)"),
        ("unknown", 1, "unknown: tenders unknown (no watcher running)"),
        ("violated", 2, "violated: tenders violated (max lag 1210 ms >= W 1000 ms)"),
        ("two", 0, "ok: tenders ok (lag p99 35 ms / W 1000 ms), plans ok (checkpoint 0.4 s old)"),
        (
            "stalled",
            1,
            "at-risk: tenders ok (lag p99 35 ms / W 1000 ms), "
            "plans at-risk (the checkpoint is 41 s behind the newest write (threshold 5 s))",
        ),
        ("empty", 1, "unknown: no feeds"),
    ],
)
def test_check_each_state(
    server: HealthServer, capsys: pytest.CaptureFixture[str], state: str, status: int, line: str
) -> None:
    exit_status, out, err = check(f"{server.url}/{state}/feeds/health", capsys)
    assert (exit_status, out, err) == (status, line + "\n", "")


@pytest.mark.parametrize(
    "path, message",
    [
        ("/text/feeds/health", "/text/feeds/health did not answer with a health view: the body is not JSON"),
        ("/other/feeds/health", "/other/feeds/health did not answer with a health view: no 'feeds' list"),
        (
            "/badverdict/feeds/health",
            "the verdict of feed 'tenders' 'great' is not one of ok, unknown, at-risk, violated",
        ),
        ("/broken/feeds/health", "/broken/feeds/health answered HTTP 500: Internal error"),
        (
            "/proxy/feeds/health",
            "/proxy/feeds/health answered HTTP 503 but not with a health view: the body is not JSON",
        ),
        ("/nothing/feeds/health", "/nothing/feeds/health answered HTTP 404: Not Found"),
    ],
)
def test_check_something_that_is_not_a_health_view(
    server: HealthServer, capsys: pytest.CaptureFixture[str], path: str, message: str
) -> None:
    exit_status, out, err = check(server.url + path, capsys)
    assert exit_status == 2 and out == ""
    assert err.endswith("\n") and err.count("\n") == 1
    assert err.startswith(f"openprocurement-feed monitor: {server.url}") and message in err


def test_check_unreachable_url_is_a_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    from openprocurement_feed.embedded.server import free_port

    url = f"http://127.0.0.1:{free_port()}/api/2.5/feeds/health"
    exit_status, out, err = check(url, capsys, "--timeout", "2")
    assert exit_status == 2 and out == ""
    assert err == (
        f"openprocurement-feed monitor: cannot reach {url}: the connection failed (refused or unknown host)\n"
    )


def test_check_the_base_url(server: HealthServer, capsys: pytest.CaptureFixture[str]) -> None:
    for url in (f"{server.url}/api/2.5", f"{server.url}/api/2.5/", f"{server.url}/api/2.5?x=1"):
        assert check(url, capsys) == (0, "ok: tenders ok (lag p99 35 ms / W 1000 ms)\n", "")
    assert set(server.hits) == {"/api/2.5/feeds/health"}


def test_check_a_health_view_on_a_path_of_its_own(server: HealthServer, capsys: pytest.CaptureFixture[str]) -> None:
    """/status/feeds/health is a 404, so the URL as given is tried next."""
    assert check(f"{server.url}/status", capsys)[0] == 0
    assert server.hits == {"/status": 1}


def test_check_neither_url_is_a_health_view(server: HealthServer, capsys: pytest.CaptureFixture[str]) -> None:
    exit_status, _, err = check(f"{server.url}/api/2.4", capsys)
    assert exit_status == 2
    assert err == (
        f"openprocurement-feed monitor: {server.url}/api/2.4/feeds/health answered HTTP 404: "
        f"Not Found; {server.url}/api/2.4 answered HTTP 404: Not Found\n"
    )


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["monitor", "ftp://x/feeds/health"],
            "argument URL: expected an http:// or https:// URL, got 'ftp://x/feeds/health'",
        ),
        (["monitor", "localhost:6543"], "argument URL: expected an http:// or https:// URL"),
        (["monitor", "http://h/", "--interval", "0"], "argument --interval: expected a number > 0, got '0'"),
        (["monitor", "http://h/", "--interval", "soon"], "argument --interval: expected a number >= 0, got 'soon'"),
        (["monitor", "http://h/", "--for", "-1"], "argument --for: expected a number >= 0, got '-1'"),
        (["monitor", "http://h/", "--for", "inf"], "argument --for: expected a number >= 0, got 'inf'"),
        (["monitor", "http://h/", "--timeout", "nan"], "argument --timeout: expected a number >= 0, got 'nan'"),
        (["monitor", "http://h/", "--check", "--verbose"], "unrecognized arguments: --verbose"),
        (["monitor"], "the following arguments are required: URL"),
    ],
)
def test_bad_flags_are_argparse_errors(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli_main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


@pytest.mark.parametrize("flag", [["--interval", "1"], ["--for", "3"]])
def test_live_view_flags_are_refused_with_check(flag: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["monitor", "http://127.0.0.1:1/", "--check", *flag]) == 2
    assert capsys.readouterr().err == (
        f"openprocurement-feed monitor: {flag[0]} is for the live view; --check makes one request\n"
    )


# -- the pieces -------------------------------------------------------------------


def test_candidate_urls() -> None:
    assert candidate_urls("http://h/api/2.5/feeds/health") == ("http://h/api/2.5/feeds/health",)
    assert candidate_urls("http://h/api/2.5/feeds/health/?a=1") == ("http://h/api/2.5/feeds/health/?a=1",)
    assert candidate_urls("http://h:1/api/2.5/?a=1") == (
        "http://h:1/api/2.5/feeds/health?a=1",
        "http://h:1/api/2.5/?a=1",
    )
    assert candidate_urls("http://h") == ("http://h/feeds/health", "http://h")


def test_a_sparse_health_body_is_read() -> None:
    """Fields beyond the name and verdict may be missing or null."""
    body = parse_health({"status": "unknown", "feeds": [{"name": "t", "verdict": "unknown", "lag_ms": None}]})
    (only,) = body.feeds
    assert (only.lag.count, only.lag.max, only.watcher_running, only.checkpoint_age) == (0, None, False, None)
    odd = json.loads(
        '{"status": "ok", "feeds": [{"name": "t", "verdict": "ok", "watcher": [], '
        '"lag_ms": {"count": 1e400, "max": NaN, "p99": true, "p50": "12"}}]}'
    )
    lag = parse_health(odd).feeds[0].lag
    assert (lag.count, lag.max, lag.p99, lag.p50) == (0, None, None, None)


@pytest.mark.parametrize(
    "body, message",
    [
        ([], "no 'feeds' list"),
        ({"status": "ok"}, "no 'feeds' list"),
        ({"status": "fine", "feeds": []}, "the status 'fine' is not one of"),
        ({"status": "ok", "feeds": ["tenders"]}, "feed #1 has no 'name'"),
        ({"status": "ok", "feeds": [{"name": "t"}]}, "the verdict of feed 't' None is not one of"),
    ],
)
def test_bodies_that_are_not_health_views(body: Any, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_health(body)


def test_formats() -> None:
    assert [format_ms(v) for v in (None, 0.0, 0.46, 9.95, 35.0, 640.4)] == ["–", "0", "0.5", "9.9", "35", "640"]
    assert [format_age(v) for v in (None, 0.4, 59.9, 184, 7500)] == ["–", "0.4 s", "59.9 s", "3 min 04 s", "2 h 05 min"]


# -- the live view ----------------------------------------------------------------

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@pytest.fixture
def terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make rich take captured stdout for a wide, interactive terminal."""
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setenv("TTY_COMPATIBLE", "1")
    monkeypatch.setenv("TTY_INTERACTIVE", "1")
    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setenv("LINES", "40")
    monkeypatch.delenv("NO_COLOR", raising=False)


def live(url: str, capsys: pytest.CaptureFixture[str], *extra: str, seconds: float = 1) -> tuple[int, str, float]:
    """``monitor URL --for SECONDS --interval 0.2``: exit status, the screens
    without colour codes, seconds taken."""
    started = time.monotonic()
    status = cli_main(["monitor", url, "--for", f"{seconds:g}", "--interval", "0.2", *extra])
    return status, ANSI.sub("", capsys.readouterr().out), time.monotonic() - started


def live_answers(server: HealthServer, path: str, answers: int, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """The live view of ``path`` stopped by Ctrl-C once it has shown
    ``answers`` answers (a count of refreshes, not a span of time a loaded
    machine fits fewer into; the interrupting request's answer may be
    shown too): exit status, the screens without colour codes."""
    server.interrupt_at[path] = answers + 1
    status, out, _ = live(server.url + path, capsys, seconds=120)
    assert server.hits[path] == answers + 1, server.hits
    return status, out


def stopped_after(out: str) -> float:
    """The seconds in the summary line's ``monitor: stopped after N s``."""
    found = re.match(r"monitor: stopped after (\d+\.\d) s: ", out.rstrip("\n").splitlines()[-1])
    assert found, out.rstrip("\n").splitlines()[-1]
    return float(found.group(1))


def test_live_view_renders_the_table(server: HealthServer, terminal: None, capsys: pytest.CaptureFixture[str]) -> None:
    status, out = live_answers(server, "/two/feeds/health", 3, capsys)
    assert status == 0
    # refreshed: a header per answer shown
    assert out.count(f" OK   {server.url}/two/feeds/health") >= 3
    assert re.search(
        r"┃ feed +┃ order +┃ +W ┃ verdict ┃ +p50 ┃ +p99 ┃ +max ┃ +count ┃ +ckpt ┃ +watcher ┃ reason +┃", out
    )
    row = next(line for line in out.splitlines() if "tenders" in line)
    assert re.search(
        r"tenders +│ watermark │ 1 s │ ok +│ +12 │ +35 │ +37 │ +4210 │ +– │ +1.2 s │ "
        r"max start-to-commit lag 37 ms is below half of W \(500 ms\)",
        row,
    ), row
    assert re.search(r"plans +│ commit +│ 1 s │ ok +│ .*│ +0.4 s │ +1.2 s │ the sequencer keeps up", out)
    assert "start-to-commit lag in ms, count: samples over the last 5 min 00 s" in out
    last = out.rstrip("\n").splitlines()[-1]
    assert re.fullmatch(
        r"monitor: stopped after \d+\.\d s: 4 requests, 0 failed; last status ok, worst seen ok", last
    ), last


def test_live_view_stops_after_its_for_seconds(
    server: HealthServer, terminal: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--for``: it stops by itself, not before the seconds asked (a slow
    last answer may make it later: only a hang is bounded)."""
    status, out, took = live(f"{server.url}/two/feeds/health", capsys, seconds=1)
    assert status == 0 and server.hits["/two/feeds/health"] >= 1
    assert 1.0 <= stopped_after(out) <= took + 0.05 < 60, (out.splitlines()[-1], took)  # rounded to 0.1
    assert re.search(r": (\d+) requests, 0 failed; last status ok, worst seen ok$", out.rstrip("\n"))


def test_live_view_on_80_columns_puts_the_reasons_under_the_table(
    server: HealthServer, terminal: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    status, out, _ = live(f"{server.url}/two/feeds/health", capsys)
    assert status == 0
    assert "…" not in out and all(len(line) <= 80 for line in out.splitlines()[:-1])
    assert re.search(r"\ntenders +watermark +1 s +ok +12 +35 +37 +4210 +– +1.2 s *\n", out)
    assert (
        "\ntenders: max start-to-commit lag 37 ms is below half of W (500 ms)\nplans: the sequencer keeps up\n" in out
    )


def test_live_view_shows_brackets_as_sent(
    server: HealthServer, terminal: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """Rich markup in a name or a reason is text, not styling (nor an error)."""
    status, out, _ = live(f"{server.url}/brackets/feeds/health", capsys)
    assert status == 0
    assert "[/bold]t[red]" in out and "lag [/] [b]37[/b] ms" in out


def test_live_view_colours_the_verdict(
    server: HealthServer, terminal: None, capsys: pytest.CaptureFixture[str]
) -> None:
    cli_main(["monitor", f"{server.url}/violated/feeds/health", "--for", "0.3", "--interval", "0.2"])
    out = capsys.readouterr().out
    assert "\x1b[1;31mviolated" in out  # bold red


def test_live_view_survives_an_unreachable_url(terminal: None, capsys: pytest.CaptureFixture[str]) -> None:
    from openprocurement_feed.embedded.server import free_port

    url = f"http://127.0.0.1:{free_port()}/api/2.5/feeds/health"
    status, out, _ = live(url, capsys)
    assert status == 0 and "Traceback" not in out
    assert f" UNREACHABLE   {url}" in out
    assert (
        f"cannot reach {url}: the connection failed (refused or unknown host) (retrying every 0.2 s; no answer yet)"
    ) in out
    last = out.rstrip("\n").splitlines()[-1]
    assert stopped_after(out) >= 1.0, last
    assert re.fullmatch(
        rf"monitor: stopped after \d+\.\d s: (\d+) requests, \1 failed; last status unreachable "
        rf"\(cannot reach {re.escape(url)}: .*\)",
        last,
    ), last


def test_live_view_recovers_after_errors(
    server: HealthServer, terminal: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two failed answers, then a health view: the error shows, then the table."""
    server.interrupt_at["/flaky/feeds/health"] = 4  # stopped on the 4th request: 3 answers shown
    status, out, _ = live(f"{server.url}/flaky", capsys, seconds=120)
    assert status == 0 and server.hits == {"/flaky/feeds/health": 4}, server.hits
    # a server error is not taken for a missing health view: the URL as given is not tried
    assert f"{server.url}/flaky/feeds/health answered HTTP 502: Bad Gateway (retrying every 0.2 s" in out
    assert set(server.hits) == {"/flaky/feeds/health"}
    assert "at-risk" in out and "max start-to-commit lag 640 ms" in out
    assert out.rstrip("\n").splitlines()[-1].endswith("2 failed; last status at-risk, worst seen at-risk")


def test_live_view_keeps_the_last_answer_while_failing(
    server: HealthServer, terminal: None, capsys: pytest.CaptureFixture[str]
) -> None:
    _, out = live_answers(server, "/flip/feeds/health", 3, capsys)
    assert re.search(
        r"answered HTTP 500: Internal Server Error \(retrying every 0.2 s; last answer \d\.\d s ago\)", out
    )
    assert out.count("tenders") >= 3  # the last table stays on screen
    counts = re.search(r": (\d+) requests, (\d+) failed; last status ", out.splitlines()[-1])
    # the interrupted 4th request counts as sent; its answer, a failure too, may be recorded or not
    assert counts and int(counts[1]) == 4 and int(counts[2]) in (2, 3), out.splitlines()[-1]


def test_live_view_to_a_file_prints_the_last_screen(
    server: HealthServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("COLUMNS", "200")
    status, out, _ = live(f"{server.url}/unknown/feeds/health", capsys)
    assert status == 0 and "\x1b[" not in out
    assert out.count(" UNKNOWN ") == 1 and HOW_TO_WATCH in out
    assert re.search(r"tenders +│ watermark │ 1 s │ unknown │ +– │ +– │ +– │ +0 │ +– │ +none │", out)


@pytest.mark.server  # starts a server or a process of its own
def test_ctrl_c_stops_the_live_view_with_exit_0(server: HealthServer) -> None:
    command = [
        sys.executable,
        "-c",
        "import sys; from openprocurement_feed.cli import main; sys.exit(main())",
        "monitor",
        f"{server.url}/ok/feeds/health",
        "--interval",
        "0.1",
    ]
    env = dict(os.environ, COLUMNS="200", PYTHONWARNINGS="ignore")
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 30
        while server.hits.get("/ok/feeds/health", 0) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, err
    assert "Traceback" not in err and "tenders" in out
    assert re.fullmatch(
        r"monitor: stopped after \d+\.\d s: \d+ requests, 0 failed; last status ok, worst seen ok",
        out.rstrip("\n").splitlines()[-1],
    )
