"""The reconcile client's error paths: every fault is one clear message and
exit status 2, never a traceback. A feed that cannot be read, the answers
400, 501 and 503 (``Retry-After`` honoured a few times), an answer that is no
Negentropy message, bad flags, and a copy that cannot be read (its line
named)."""

from __future__ import annotations

import json
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from reconcile_support import Feed, serve, write_lines

from openprocurement_feed.cli import main
from openprocurement_feed.client import FeedError, FeedHTTP, FeedUnavailable, RetryPolicy
from openprocurement_feed.client.itemsfile import ItemsFileError, read_items
from openprocurement_feed.client.reconcile import ReconcileError, reconcile_feed, reconcile_url
from openprocurement_feed.demo.load import create_tenders

ONE = uuid.UUID(int=1).hex
TWO = uuid.UUID(int=2).hex
STAMP = "2021-03-04T05:06:07.123456+02:00"


@pytest.fixture
def feed(settings: dict[str, str]) -> Iterator[Feed]:
    """The demo API (watermark order) behind the tamper."""
    for tamper, api, registry in serve(settings):
        yield Feed(api, tamper, registry, "watermark")


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    path = tmp_path / "copy.jsonl"
    write_lines(path, [{"id": ONE, "dateModified": STAMP}])
    return path


def failed(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """Run the command, expect exit status 2 and one clear message: stderr."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


# -- the feed's answers ---------------------------------------------------------


@pytest.mark.server
def test_503_is_retried_as_retry_after_says_then_the_check_goes_on(feed: Feed) -> None:
    create_tenders(feed.api, 3, seed=1)
    held = feed.database()
    feed.settle(held)
    waits: list[float] = []
    http = FeedHTTP(feed.url, retry=RetryPolicy(initial_backoff=0.01, max_attempts=4), sleep=waits.append)
    feed.tamper.add(503, {"Retry-After": "3"})  # the horizon
    feed.tamper.add(503, {"Retry-After": "2"})  # then the first round
    result = reconcile_feed(feed.url, held.items(), http=http)
    assert result.in_sync and feed.tamper.injected == [503, 503]
    assert waits == [3.0, 2.0]


@pytest.mark.server
def test_a_503_that_lasts_gives_up_with_the_servers_reason(
    feed: Feed, copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    waits: list[float] = []
    http = FeedHTTP(feed.url, retry=RetryPolicy(initial_backoff=0.01, max_attempts=3), sleep=waits.append)
    feed.tamper.add(503, {"Retry-After": "1"}, count=3)
    with pytest.raises(FeedUnavailable, match=r"after 3 attempt\(s\).*HTTP 503: reconcile: injected 503"):
        reconcile_feed(feed.url, [], http=http)
    assert waits == [1.0, 1.0]

    feed.tamper.add(503, {"Retry-After": "0"}, count=2)
    err = failed(capsys, ["verify", feed.url, "--items", str(copy), "--max-attempts", "2"])
    assert "the feed could not be read: gave up on" in err and "HTTP 503" in err


@pytest.mark.server
def test_501_and_400_are_one_line_each(feed: Feed, copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    feed.tamper.add(501)
    err = failed(capsys, ["verify", feed.url, "--items", str(copy)])
    assert "HTTP 501: this feed cannot be reconciled: reconcile: injected 501" in err
    assert feed.tamper.injected == [501]  # not retried

    feed.tamper.corrupt_request = b"\x61\x00\xff"  # truncated: the real endpoint answers 400
    err = failed(capsys, ["verify", feed.url, "--items", str(copy)])
    assert "HTTP 400" in err and "POST" in err
    assert err.count("\n") == 2  # the copy's line and the message


@pytest.mark.server
def test_an_answer_that_is_no_negentropy_message_is_a_protocol_error(
    feed: Feed, copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    create_tenders(feed.api, 3, seed=2)
    feed.settle(feed.database())
    feed.tamper.cut_answer = 3
    with pytest.raises(ReconcileError, match="answer to round 1 is not a valid Negentropy message"):
        reconcile_feed(feed.url, [(ONE, STAMP)])
    err = failed(capsys, ["verify", feed.url, "--items", str(copy)])
    assert "not a valid Negentropy message" in err

    feed.tamper.cut_answer = None
    feed.tamper.corrupt_request = None
    feed.tamper.add(200)  # a 200 that is not the horizon's JSON: injected bodies are error JSON
    err = failed(capsys, ["verify", feed.url, "--items", str(copy)])
    assert 'returned no "until" integer' in err


@pytest.mark.server
def test_no_endpoint_and_no_feed_are_said_plainly(feed: Feed, copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = failed(capsys, ["verify", f"{feed.api}/nothing", "--items", str(copy)])
    assert "HTTP 404: the server has no reconcile endpoint there" in err

    with socket.create_server(("127.0.0.1", 0)) as closed:
        port = closed.getsockname()[1]
    err = failed(
        capsys, ["verify", f"http://127.0.0.1:{port}/api/2.5/tenders", "--items", str(copy), "--max-attempts", "1"]
    )
    assert "the feed could not be read" in err and "connection failed" in err


def test_the_endpoint_is_beside_the_feed() -> None:
    assert reconcile_url("https://h/api/2.5/tenders?mode=test") == "https://h/api/2.5/feeds/tenders/reconcile"
    assert reconcile_url("http://h:1/tenders/") == "http://h:1/feeds/tenders/reconcile"
    with pytest.raises(FeedError, match="names no feed"):
        reconcile_url("http://h/")


# -- the command's input --------------------------------------------------------


def test_bad_flags_are_refused_with_their_name(copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = "http://127.0.0.1:9/api/2.5/tenders"
    for argv, message in (
        (["verify", url], "--items"),
        (["verify", "not-a-url", "--items", str(copy)], "expected an http"),
        (["verify", url, "--items", str(copy), "--fetch"], "--fetch goes with --repair"),
        (["verify", url, "--items", str(copy), "--mode", "real"], "--mode"),
        (["verify", url, "--items", str(copy), "--fetch-concurrency", "0"], "--fetch-concurrency"),
        (["verify", url, "--items", str(copy), "--max-attempts", "0"], "--max-attempts"),
        (["sync", url, "--state", "s.json", "--verify"], "--verify needs --out"),
        (["sync", url, "--state", "s.json", "--out", "o", "--verify", "--follow"], "no --follow"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == 2
        assert message in capsys.readouterr().err


def line(**fields: str) -> str:
    return json.dumps(fields) + "\n"


@pytest.mark.parametrize(
    "text, message",
    [
        (line(id=ONE, dateModified=STAMP) + "{broken\n", "line 2 is not JSON"),
        ("[1, 2]\n", "line 1 is not a JSON object"),
        ("\n" + line(dateModified=STAMP), 'line 2 has no "id" string'),
        (line(id="abc", dateModified=STAMP), "line 1: the id 'abc' is not 32 hexadecimal digits"),
        (line(id=ONE), f'line 1 ({ONE}) has no "dateModified" string'),
        (line(id=ONE, dateModified="yesterday"), f"line 1 ({ONE}): dateModified 'yesterday'"),
        (line(id=ONE, dateModified="2021-03-04T05:06:07"), "with a UTC offset"),
    ],
)
def test_a_copy_that_cannot_be_read_names_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str
) -> None:
    path = tmp_path / "copy.jsonl"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ItemsFileError, match="line"):
        read_items(path)
    err = failed(capsys, ["verify", "http://127.0.0.1:9/api/2.5/tenders", "--items", str(path)])
    assert err.startswith("openprocurement-feed verify: ") and message in err, err


def test_a_copy_that_is_no_file_or_no_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = "http://127.0.0.1:9/api/2.5/tenders"
    assert "cannot read" in failed(capsys, ["verify", url, "--items", str(tmp_path / "none.jsonl")])
    assert "cannot read" in failed(capsys, ["verify", url, "--items", str(tmp_path)])
    binary = tmp_path / "binary.jsonl"
    binary.write_bytes(b'{"id": "%s", "dateModified": "%s"}\n\xff\xfe\n' % (ONE.encode(), STAMP.encode()))
    assert "line 2 is not UTF-8 text" in failed(capsys, ["verify", url, "--items", str(binary)])


def test_the_newest_line_of_an_id_wins_and_a_removal_takes_it_out(tmp_path: Path) -> None:
    path = tmp_path / "copy.jsonl"
    newer = "2021-03-04T05:06:08+02:00"
    write_lines(
        path,
        [
            {"id": ONE, "dateModified": STAMP},
            {"id": TWO.upper(), "dateModified": STAMP, "title": "a whole object"},
            {"id": ONE, "dateModified": newer},
            {"id": ONE, "dateModified": STAMP},  # an older version repeated: not brought back
            {"id": TWO, "removed": True},
        ],
    )
    copy = read_items(path)
    assert copy.versions == {ONE: newer} and copy.lines == 5 and copy.removed == 1
    with path.open("a") as stream:
        stream.write(json.dumps({"id": TWO, "dateModified": STAMP}) + "\n")
    assert read_items(path).versions == {ONE: newer, TWO: STAMP}
