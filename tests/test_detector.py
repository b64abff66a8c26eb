"""The detector on hand-made pages and on the real demo API; the ``check``
and ``race`` command lines (errors, quiet feeds); the report text."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest

from openprocurement_feed.cli import main as cli_main
from openprocurement_feed.race.crawler import Crawler
from openprocurement_feed.race.detector import CheckResult, Detector, late_arrivals, late_in_feed_order
from openprocurement_feed.race.feed import CHECK_RETRY, FeedClient, FeedError, FeedItem, parse_item
from openprocurement_feed.race.report import check_summary, format_anomaly, race_json, race_table
from openprocurement_feed.race.results import RunResult
from tests import test_client

#: A real HTTP server on loopback answering what a test sets (shared with the client tests).
canned = test_client.canned

T = 1_700_000_000.0


def item(key: str, ms: int) -> FeedItem:
    """A feed item stamped ``ms`` milliseconds after ``T``."""
    return FeedItem(key, round(T + ms / 1000.0, 3), f"dm-{key}-{ms}")


# -- late_arrivals on hand-made pages ---------------------------------------

SNAPSHOT = (item("e", 500), item("d", 400), item("c", 300), item("b", 200))  # newest first


def test_nothing_new_is_no_anomaly() -> None:
    assert late_arrivals(SNAPSHOT, reversed(SNAPSHOT)) == ()


def test_an_item_inside_the_window_that_was_not_in_the_snapshot_is_late() -> None:
    late = item("x", 350)
    assert late_arrivals(SNAPSHOT, [SNAPSHOT[2], late, SNAPSHOT[1]]) == (late,)


def test_an_item_at_exactly_the_newest_stamp_is_late() -> None:
    """A crawler's offset at ``newest`` asks for newer items: this one is behind it."""
    late = item("x", 500)
    result = CheckResult(0.0, SNAPSHOT, late_arrivals(SNAPSHOT, [late]))
    assert result.late == (late,)
    assert result.lags_ms == [0.0]


def test_the_rest_of_a_tie_group_cut_by_the_page_is_not_late() -> None:
    """The snapshot page ended inside a group of equal stamps at ``oldest``."""
    cut = (item("e", 500), item("d", 400), item("c2", 200))
    rest = [item("c0", 200), item("c1", 200), item("c2", 200), item("d", 400), item("e", 500)]
    assert late_arrivals(cut, rest) == ()


def test_items_outside_the_window_are_not_late() -> None:
    older, newer = item("old", 100), item("new", 501)
    assert late_arrivals(SNAPSHOT, [older, newer]) == ()


def test_a_snapshot_item_rewritten_past_the_window_is_not_late() -> None:
    rewritten = item("c", 900)
    assert late_arrivals(SNAPSHOT, [SNAPSHOT[0], rewritten]) == ()


def test_a_snapshot_item_rewritten_inside_the_window_is_late() -> None:
    """Its new version was stamped behind ``newest`` and committed after the snapshot."""
    rewritten = item("b", 450)
    result = CheckResult(0.0, SNAPSHOT, late_arrivals(SNAPSHOT, [rewritten]))
    assert result.late == (rewritten,)
    assert result.is_rewrite(rewritten)
    assert result.lags_ms == [50.0]


def test_a_late_item_seen_twice_is_reported_once() -> None:
    late = item("x", 250)
    assert late_arrivals(SNAPSHOT, [late, late]) == (late,)


def test_an_empty_snapshot_has_no_window() -> None:
    assert late_arrivals((), [item("x", 1)]) == ()
    result = CheckResult(0.0, ())
    assert (result.oldest, result.newest, result.lags_ms, result.anomaly) == (None, None, [], False)


def test_a_single_stamp_snapshot_has_an_empty_window() -> None:
    snapshot = (item("a", 100), item("b", 100))
    assert late_arrivals(snapshot, [item("c", 100)]) == ()


# -- reading feeds ----------------------------------------------------------


def test_client_keeps_the_urls_own_parameters() -> None:
    client = FeedClient("http://127.0.0.1:1/api/2.5/tenders?mode=test&opt_fields=title&offset=9&limit=5&x=1", limit=7)
    assert client.url == "http://127.0.0.1:1/api/2.5/tenders?x=1"
    url = urlsplit(client.http.request_url("1.1.x", descending=True))
    assert dict(parse_qsl(url.query)) == {
        "x": "1",
        "mode": "test",
        "opt_fields": "public_modified,title",
        "limit": "7",
        "descending": "1",
        "offset": "1.1.x",
    }
    assert "offset" not in client.http.request_url(None)
    assert "mode=_all_" in FeedClient("http://h/f?mode=test", mode="_all_").http.request_url(None)


@pytest.mark.parametrize(
    "raw, message",
    [
        ({"title": "x"}, "an item has no 'id'"),
        ("x", "an item has no 'id'"),
        ({"id": "x"}, "lack 'public_modified'"),
        ({"id": "x", "public_modified": "soon"}, "not a number"),
        ({"id": "x", "public_modified": [1]}, "not a number"),
    ],
)
def test_items_that_are_not_feed_items(raw: Any, message: str) -> None:
    with pytest.raises(FeedError, match=message):
        parse_item(raw, "http://127.0.0.1:1/feed")


def test_a_feed_item_is_read() -> None:
    raw = {"id": "a", "public_modified": str(T), "dateModified": "d"}
    assert parse_item(raw, "http://h/f") == FeedItem("a", T, "d")
    assert parse_item({"id": "a"}, "http://h/f", need_stamp=False) == FeedItem("a", 0.0, "")


def test_the_checker_retries_a_busy_feed_and_reads_the_page(canned: Any) -> None:
    """503 then a page: the shared reader's retry policy, not the detector, waits."""
    answers = iter(
        [
            (503, {}, "busy"),
            (
                200,
                {"Content-Type": "application/json"},
                json.dumps(
                    {
                        "data": [{"id": "a", "public_modified": T, "dateModified": "d"}],
                        "next_page": {"offset": "1.1.x"},
                        "prev_page": {"offset": ""},
                    }
                ),
            ),
        ]
    )
    canned.answer = lambda path: next(answers)
    waits: list[float] = []
    client = FeedClient(f"http://127.0.0.1:{canned.server_address[1]}/feed", sleep=waits.append)
    try:
        page = client.page("0.5", descending=True)
    finally:
        client.close()
    assert page.items == (FeedItem("a", T, "d"),)
    assert (page.next_offset, page.prev_offset) == ("1.1.x", None)
    assert len(waits) == 1 and CHECK_RETRY.initial_backoff <= waits[0] <= 2 * CHECK_RETRY.initial_backoff
    assert [path.split("?")[0] for path, _ in canned.seen] == ["/feed", "/feed"]
    assert "descending=1" in canned.seen[0][0] and "offset=0.5" in canned.seen[0][0]


def test_the_checker_gives_up_after_its_attempts(canned: Any) -> None:
    canned.answer = (502, {}, "bad gateway")
    waits: list[float] = []
    client = FeedClient(f"http://127.0.0.1:{canned.server_address[1]}/feed", sleep=waits.append)
    with pytest.raises(FeedError, match=r"cannot reach .*/feed: HTTP 502 \(gave up after 3 attempt\(s\)"):
        client.page()
    client.close()
    assert len(canned.seen) == CHECK_RETRY.max_attempts == 3 and len(waits) == 2


def test_a_body_that_is_not_a_feed_is_a_feed_error(canned: Any) -> None:
    canned.answer = (
        200,
        {"Content-Type": "application/json"},
        json.dumps({"data": [{"title": "x"}], "next_page": {"offset": ""}}),
    )
    client = FeedClient(f"http://127.0.0.1:{canned.server_address[1]}/feed")
    with pytest.raises(FeedError, match="an item has no 'id'"):
        client.page()
    client.close()


# -- against the real demo API ----------------------------------------------


@pytest.fixture
def server(settings: dict[str, str]) -> Iterator[Any]:
    """The demo API on a real HTTP server over the test database."""
    from openprocurement_feed.demo.server import DemoServer

    with DemoServer(settings, threads=4) as running:
        yield running


@pytest.fixture
def put(server: Any) -> Callable[..., None]:
    """Store tenders with chosen stamps (ms after ``T``), bypassing the API."""
    store = server.registry.feed_store

    def put(*stamps: tuple[str, int], **fields: Any) -> None:
        for key, ms in stamps:
            doc = {
                "_id": key,
                "status": "active",
                "dateModified": f"dm-{key}",
                "public_modified": round(T + ms / 1000.0, 3),
                **fields,
            }
            store.save_data(store.collection("tenders"), doc, insert=True, modified=False)

    return put


def test_detector_finds_a_document_committed_behind_the_window(server: Any, put: Callable[..., None]) -> None:
    put(("a", 100), ("b", 200), ("c", 300))
    detector = Detector(FeedClient(server.api_url + "/tenders", limit=10), wait=0)
    result = detector.check(sleep=lambda seconds: put(("late", 250), ("after", 400)))
    assert [shown.id for shown in result.snapshot] == ["c", "b", "a"]
    assert [late.id for late in result.late] == ["late"]
    assert result.lags_ms == [50.0]
    text = format_anomaly(result)
    assert "late" in text and "50 ms older than the newest" in text
    assert "(1700000000.100 … 1700000000.300]" in text


def test_detector_follows_the_refetch_across_pages(server: Any, put: Callable[..., None]) -> None:
    put(*[(f"d{number:02d}", 10 * number) for number in range(12)])
    detector = Detector(FeedClient(server.api_url + "/tenders", limit=5), wait=0)
    result = detector.check(sleep=lambda seconds: put(("late", 75), ("x", 5)))
    assert [shown.id for shown in result.snapshot] == ["d11", "d10", "d09", "d08", "d07"]
    assert [late.id for late in result.late] == ["late"]


def test_no_false_positive_when_the_page_cuts_a_tie_group(server: Any, put: Callable[..., None]) -> None:
    put(("a", 100), ("t1", 200), ("t2", 200), ("t3", 200), ("t4", 200), ("z", 300))
    detector = Detector(FeedClient(server.api_url + "/tenders", limit=3), wait=0)
    result = detector.check(sleep=lambda seconds: None)
    assert next(shown.public_modified for shown in result.snapshot) == round(T + 0.3, 3)
    assert result.late == ()
    assert result.refetched >= 1


def test_crawler_receives_every_version_once(server: Any, put: Callable[..., None]) -> None:
    put(*[(f"d{number}", number) for number in range(7)])
    crawler = Crawler(FeedClient(server.api_url + "/tenders", limit=3))
    while crawler.poll_once():
        pass
    assert sorted(crawler.log.seen) == [f"d{number}" for number in range(7)]
    assert crawler.log.saw("d3", "dm-d3")
    assert crawler.log.duplicates == 0 and crawler.log.deliveries == 7
    crawler.client.close()


# -- the check command ------------------------------------------------------


def test_check_a_quiet_feed_exits_0(server: Any, put: Callable[..., None], capsys: pytest.CaptureFixture[str]) -> None:
    put(("a", 100), ("b", 200))
    status = cli_main(["check", server.api_url + "/tenders", "--checks", "3", "--wait", "0.01", "--interval", "0"])
    out = capsys.readouterr().out
    assert status == 0
    assert "3 checks" in out and ": 0 with late arrivals" in out


def test_check_an_empty_feed_says_so(server: Any, capsys: pytest.CaptureFixture[str]) -> None:
    status = cli_main(["check", server.api_url + "/tenders", "--checks", "2", "--wait", "0.01", "--interval", "0"])
    assert status == 0
    assert "2 empty snapshots" in capsys.readouterr().out


def test_check_is_mode_aware(server: Any, put: Callable[..., None], capsys: pytest.CaptureFixture[str]) -> None:
    put(("t1", 100), ("t2", 200), mode="test")
    argv = ["check", server.api_url + "/tenders", "--checks", "2", "--wait", "0.01", "--interval", "0"]
    assert cli_main(argv) == 0
    assert "2 empty snapshots" in capsys.readouterr().out
    assert cli_main([*argv, "--mode", "test"]) == 0
    assert "2 checks in" in capsys.readouterr().out
    assert cli_main([*argv[:1], server.api_url + "/tenders?mode=_all_", *argv[2:]]) == 0
    assert "2 checks in" in capsys.readouterr().out


def test_check_unreachable_url_is_a_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    from openprocurement_feed.embedded.server import free_port

    url = f"http://127.0.0.1:{free_port()}/api/2.5/tenders"
    assert cli_main(["check", url, "--checks", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"openprocurement-feed check: cannot reach {url}")


@pytest.mark.parametrize(
    "path, message",
    [
        ("/api/2.5/tenders/" + "0" * 32, "HTTP 404"),
        ("/nothing-here", "HTTP 404"),
    ],
)
def test_check_something_that_is_not_a_feed(
    server: Any, capsys: pytest.CaptureFixture[str], path: str, message: str
) -> None:
    assert cli_main(["check", server.url + path, "--checks", "1", "--wait", "0.01"]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_check_a_json_answer_that_is_not_a_feed(
    server: Any, put: Callable[..., None], capsys: pytest.CaptureFixture[str]
) -> None:
    put(("a", 100))
    assert cli_main(["check", server.api_url + "/tenders/a", "--checks", "1"]) == 2
    assert 'did not return a feed page (no "data" list)' in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["check", "ftp://x"], "argument URL: expected an http:// or https:// URL"),
        (["check", "http://127.0.0.1:1/f", "--checks", "0"], "argument --checks: expected an integer >= 1"),
        (["check", "http://127.0.0.1:1/f", "--duration", "-1"], "argument --duration"),
        (["check", "http://127.0.0.1:1/f", "--mode", "real"], "argument --mode: invalid choice: 'real'"),
        (["race", "--duration", "0"], "argument --duration: expected a number > 0"),
        (["race", "--writers", "two"], "argument --writers: expected an integer >= 1"),
        (["race", "--small", "-1"], "argument --small: expected an integer >= 0"),
        (["race", "--write-delay", "40-5"], "argument --write-delay: Invalid write delay: '40-5'"),
        (["race", "--write-delay", "soon"], "argument --write-delay: Invalid write delay"),
        (["race", "--watermark", "-1"], "argument --watermark: expected a number >= 0"),
        (["race", "--watermark", "nan"], "argument --watermark: expected a number >= 0"),
        (["race", "--rate", "fast"], "argument --rate"),
        (["race", "--small", "0", "--large", "0"], "at least one tender is needed"),
    ],
)
def test_bad_flags_are_clear_errors(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli_main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


# -- the report ---------------------------------------------------------------


def run_result(watermark: float, **figures: Any) -> RunResult:
    values: dict[str, Any] = dict(
        watermark=watermark,
        duration=60.0,
        tenders=140,
        writers=8,
        write_delay_ms="5-40",
        patches=4320,
        write_errors=0,
        patches_per_second=72.0,
        checks=200,
        failures=0,
        failure_percent=0.0,
        lags_ms=[],
        check_errors=0,
        crawler_items=4000,
        lost=0,
        lost_ids=[],
        duplicates=0,
        crawler_errors=0,
        feed_delay_ms={"median": 1010.0, "max": 1200.0, "count": 10},
    )
    values.update(figures)
    return RunResult(**values)


def test_race_table_and_json() -> None:
    results = [
        run_result(0.0, failures=11, failure_percent=5.5, lags_ms=[1.0, 37.0, 12.5], lost=3),
        run_result(1.0),
        run_result(
            0.0,
            order="commit",
            feed_delay_ms={"median": 40.0, "p99": 90.0, "max": 120.0},
            longpoll_delay_ms={"median": 31.0, "p99": 77.0, "max": 95.0, "count": 10},
            longpoll_lost=0,
        ),
    ]
    results[0].longpoll_lost = 2
    table = race_table(results)
    lines = table.splitlines()
    assert any(
        line.startswith("crawler delay median/p99 (ms), long-poll") and line.split()[-5:] == ["-", "-", "31", "/", "77"]
        for line in lines
    ), table
    assert any(
        line.startswith("long-poll crawler lost tenders") and line.split()[-3:] == ["2", "-", "0"] for line in lines
    ), "a run without a long-poll crawler shows '-'"
    assert lines[0].split()[1:] == ["order", "W", "=", "0", "s", "W", "=", "1", "s", "commit"]
    assert any(line.startswith("feed delay median/p99/max") and line.endswith("40 / 90 / 120") for line in lines)
    assert any(line.startswith("failures") and "11 (5.50 %)" in line and "0 (0.00 %)" in line for line in lines)
    assert any(line.startswith("late-arrival lag") and "1 / 37 / 16.8" in line for line in lines)
    assert any(line.startswith("crawler lost tenders") and line.split()[-3:] == ["3", "0", "0"] for line in lines)
    runs = json.loads(race_json(results))
    for key in (
        "watermark",
        "order",
        "duration",
        "patches_per_second",
        "checks",
        "failures",
        "lags_ms",
        "lost",
        "duplicates",
        "feed_delay_ms",
        "write_conflicts",
        "longpoll_lost",
        "longpoll_delay_ms",
    ):
        assert all(key in run for run in runs)
    assert [run["order"] for run in runs] == ["watermark", "watermark", "commit"]
    assert runs[0]["lag_summary_ms"] == {"min": 1.0, "max": 37.0, "mean": 16.8}


def test_check_summary() -> None:
    from openprocurement_feed.race.detector import DetectorStats

    stats = DetectorStats()
    stats.add(CheckResult(0.0, SNAPSHOT, (item("x", 450),)))
    stats.add(CheckResult(0.0, SNAPSHOT))
    text = check_summary(stats, 2.0)
    assert text.startswith("2 checks in 2.0 s: 1 with late arrivals (50.00 %)")
    assert "max 50 ms" in text


# -- commit order: the window read as a crawler reads it ---------------------


def test_in_feed_order_a_document_inside_the_window_is_late() -> None:
    snapshot = (item("e", 500), item("d", 400), item("c", 300))
    from_oldest = [item("c", 300), item("x", 350), item("d", 400), item("e", 500), item("n", 600)]
    from_newest = [item("n", 600)]
    assert late_in_feed_order(snapshot, from_oldest, from_newest) == (item("x", 350),)


def test_in_feed_order_new_changes_and_rewrites_are_not_late() -> None:
    """Commit order does not sort by public_modified: a change stamped inside
    the window but committed after it comes after the newest item, and a
    snapshot item shown again with newer content is the same document."""
    snapshot = (item("e", 500), item("d", 400), item("c", 300))
    stamped_early = item("y", 350)
    rewritten = item("d", 450)
    from_oldest = [item("c", 300), rewritten, item("e", 500), stamped_early]
    assert late_in_feed_order(snapshot, from_oldest, [stamped_early]) == ()
