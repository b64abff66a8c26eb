"""Long-poll feeds (SPEC E): ``feed=longpoll&timeout=S``.

Protocol rules through webtest; waiting through a real loopback server (the
threaded demo server), in both orders.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import requests
from pyramid.exceptions import ConfigurationError

from openprocurement_feed import shutdown
from openprocurement_feed.client import FeedSync
from openprocurement_feed.demo.server import DemoServer
from openprocurement_feed.settings import parse_settings

TENDERS = "/api/2.5/tenders"


class Call(threading.Thread):
    """A GET in a background thread: its response and how long it took."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.response: requests.Response | None = None
        self.error: BaseException | None = None
        self.seconds = 0.0

    def run(self) -> None:
        started = time.monotonic()
        try:
            self.response = requests.get(self.url, timeout=60)
        except BaseException as error:  # reported by result()
            self.error = error
        self.seconds = time.monotonic() - started

    def result(self, timeout: float = 30.0) -> requests.Response:
        self.join(timeout)
        assert not self.is_alive(), f"GET {self.url} did not answer within {timeout} s"
        assert self.error is None, self.error
        assert self.response is not None
        return self.response


def call(url: str) -> Call:
    thread = Call(url)
    thread.start()
    return thread


def wait_for(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


@pytest.fixture(params=["watermark", "commit"])
def order(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def server_factory(settings: dict[str, str]) -> Iterator[Callable[..., DemoServer]]:
    """Demo servers on loopback, closed after the test."""
    servers: list[DemoServer] = []

    def make(order: str = "watermark", threads: int = 8, **extra: str) -> DemoServer:
        options = dict(settings, **extra)
        if order == "commit":
            options.update({"feed.order": "commit", "feed.sequencer": "thread"})
        server = DemoServer(options, threads=threads).start()
        servers.append(server)
        if order == "commit":
            assert server.registry.feed_sequencer.wait_ready(timeout=30)
        return server

    yield make
    for server in servers:
        server.close()


def head_offset(server: DemoServer) -> str:
    """The forward offset at the head of the feed (after everything visible)."""
    offset = ""
    while True:
        page = requests.get(f"{server.api_url}/tenders?limit=1000&offset={offset}", timeout=10).json()
        if not page["data"]:
            return offset
        offset = page["next_page"]["offset"]


def create(server: DemoServer, **data: Any) -> dict[str, Any]:
    response = requests.post(f"{server.api_url}/tenders", json={"data": data or {"title": "x"}}, timeout=10)
    assert response.status_code == 201, response.text
    return dict(response.json()["data"])


# -- protocol ----------------------------------------------------------------


@pytest.mark.parametrize(
    "timeout",
    ["abc", "-1", "56", "nan", "inf", "1e400", "0x10", "1" * 40],
)
def test_a_bad_or_out_of_range_timeout_is_a_400_naming_timeout(demo_app: Any, timeout: str) -> None:
    response = demo_app.get(TENDERS, {"feed": "longpoll", "timeout": timeout}, status=400)
    assert response.json["status"] == "error"
    (error,) = response.json["errors"]
    assert error["location"] == "querystring"
    assert error["name"] == "timeout"
    assert "expected a number of seconds from 0 to 55" in error["description"]


def test_longpoll_with_descending_is_a_400_naming_feed(demo_app: Any) -> None:
    response = demo_app.get(TENDERS, {"feed": "longpoll", "descending": "1"}, status=400)
    (error,) = response.json["errors"]
    assert (error["location"], error["name"]) == ("querystring", "feed")
    assert "descending" in error["description"]


def test_other_feed_values_and_a_timeout_without_longpoll_are_ignored(demo_app: Any) -> None:
    for query in ({"feed": "changes"}, {"feed": "dateModified", "timeout": "abc"}, {"timeout": "999"}):
        page = demo_app.get(TENDERS, query).json
        assert page["next_page"]["path"] == TENDERS, query


def test_links_echo_longpoll_forward_only(demo_app: Any, put_docs: Callable[..., Any]) -> None:
    docs = put_docs([1000.0, 1001.0])
    notifier = demo_app.app.registry.feed_longpoll
    page = demo_app.get(TENDERS, {"feed": "longpoll", "timeout": "20.0", "limit": "1", "offset": "999.5"}).json
    # answered at once: no wait began (a count, not a time a loaded machine may stretch)
    assert notifier.counters("tenders").answered == 0, "a page with items must be answered at once"
    assert [item["id"] for item in page["data"]] == [docs[0]["_id"]]
    next_path = page["next_page"]["path"]
    assert "feed=longpoll" in next_path and "timeout=20&" in next_path + "&"
    # prev_page goes backward: a descending long-poll would be refused
    assert "feed=" not in page["prev_page"]["path"] and "timeout=" not in page["prev_page"]["path"]
    page = demo_app.get(page["next_page"]["path"]).json  # following next_page keeps long-polling
    assert [item["id"] for item in page["data"]] == [docs[1]["_id"]]
    assert "feed=longpoll" in page["next_page"]["path"]


def test_timeout_zero_answers_an_empty_page_at_once(demo_app: Any) -> None:
    page = demo_app.get(TENDERS, {"feed": "longpoll", "timeout": "0"}).json
    assert page["data"] == []
    assert demo_app.app.registry.feed_longpoll.counters("tenders").answered == 0, "no wait began"
    assert page["next_page"]["path"] == f"{TENDERS}?feed=longpoll&timeout=0"


def test_longpoll_settings_are_validated() -> None:
    base = {"mongodb.uri": "embedded://"}
    parsed = parse_settings(base)
    assert (parsed.longpoll_default_seconds, parsed.longpoll_max_seconds, parsed.longpoll_max_waiters) == (
        25.0,
        55.0,
        None,
    )
    parsed = parse_settings(dict(base, **{"feed.longpoll_max_waiters": "50"}), {"FEED_LONGPOLL_MAX_SECONDS": "30"})
    assert (parsed.longpoll_max_waiters, parsed.longpoll_max_seconds) == (50, 30.0)
    for key, value, message in (
        ("feed.longpoll_default_seconds", "60", "at most feed.longpoll_max_seconds"),
        ("feed.longpoll_max_seconds", "0", "seconds > 0"),
        ("feed.longpoll_default_seconds", "-1", "seconds >= 0"),
        ("feed.longpoll_max_waiters", "-1", "auto or an integer"),
        ("feed.longpoll_max_waiters", "many", "auto or an integer"),
    ):
        with pytest.raises(ConfigurationError, match=message):
            parse_settings(dict(base, **{key: value}))


# -- waiting -----------------------------------------------------------------


def test_a_waiter_is_answered_when_a_write_arrives(server_factory: Callable[..., DemoServer], order: str) -> None:
    server = server_factory(order)
    offset = head_offset(server)
    waiter = call(f"{server.api_url}/tenders?feed=longpoll&timeout=30&offset={offset}")
    notifier = server.registry.feed_longpoll
    wait_for(lambda: notifier.waiting == 1)
    doc = create(server)
    written = time.monotonic()
    response = waiter.result()
    assert response.status_code == 200
    assert [item["id"] for item in response.json()["data"]] == [doc["id"]]
    counters = notifier.counters("tenders")
    assert counters.timeouts == 0 and counters.wakeups >= 1, "answered by the write, not by the timeout"
    assert "feed=longpoll" in response.json()["next_page"]["path"]
    print(f"{order}: answered {1000 * (time.monotonic() - written):.0f} ms after the write's acknowledgement")


def test_a_timeout_answers_the_normal_empty_page(server_factory: Callable[..., DemoServer], order: str) -> None:
    server = server_factory(order)
    offset = head_offset(server)
    started = time.monotonic()
    response = requests.get(f"{server.api_url}/tenders?feed=longpoll&timeout=0.6&offset={offset}", timeout=30)
    elapsed = time.monotonic() - started
    assert response.status_code == 200 and response.json()["data"] == []
    assert response.json()["next_page"]["offset"] == offset
    assert "Retry-After" not in response.headers
    assert elapsed >= 0.55, f"answered after {elapsed:.2f} s, before its timeout"
    counters = server.registry.feed_longpoll.counters("tenders")
    assert counters.timeouts == 1 and counters.waiting == 0


def test_a_change_outside_the_waiters_mode_sends_it_back_to_waiting(
    server_factory: Callable[..., DemoServer], order: str
) -> None:
    server = server_factory(order)
    offset = head_offset(server)
    notifier = server.registry.feed_longpoll
    waiter = call(f"{server.api_url}/tenders?feed=longpoll&timeout=2&mode=test&offset={offset}")
    wait_for(lambda: notifier.waiting == 1)
    create(server)  # a real tender: not in mode=test
    wait_for(lambda: notifier.counters("tenders").wakeups >= 1)
    response = waiter.result()
    assert response.json()["data"] == []
    assert waiter.seconds >= 1.9, f"answered after {waiter.seconds:.2f} s: woken, then not back to waiting"
    assert notifier.counters("tenders").timeouts == 1


def test_over_the_cap_a_request_is_answered_at_once_with_retry_after(
    server_factory: Callable[..., DemoServer], order: str
) -> None:
    server = server_factory(order, **{"feed.longpoll_max_waiters": "2"})
    notifier = server.registry.feed_longpoll
    assert notifier.max_waiters == 2
    offset = head_offset(server)
    url = f"{server.api_url}/tenders?feed=longpoll&timeout=20&offset={offset}"
    waiters = [call(url) for _ in range(2)]
    wait_for(lambda: notifier.waiting == 2)
    response = requests.get(url, timeout=30)
    assert response.status_code == 200 and response.json()["data"] == []
    # at once: answered over the cap (Retry-After), the two still waiting
    assert response.headers["Retry-After"] == "1" and notifier.waiting == 2
    # an ordinary request is still served meanwhile
    assert requests.get(f"{server.api_url}/tenders?offset={offset}", timeout=10).status_code == 200
    assert notifier.counters("tenders").over_cap == 1
    doc = create(server)
    for waiter in waiters:
        assert [item["id"] for item in waiter.result().json()["data"]] == [doc["id"]]


def test_the_default_cap_is_half_the_servers_threads(server_factory: Callable[..., DemoServer]) -> None:
    assert server_factory(threads=6).registry.feed_longpoll.max_waiters == 3


def test_shutdown_answers_every_waiter_at_once(server_factory: Callable[..., DemoServer], order: str) -> None:
    server = server_factory(order, threads=12)
    offset = head_offset(server)
    waiters = [call(f"{server.api_url}/tenders?feed=longpoll&timeout=50&offset={offset}") for _ in range(4)]
    wait_for(lambda: server.registry.feed_longpoll.waiting == 4)
    started = time.monotonic()
    server.close()
    closed = time.monotonic() - started
    for waiter in waiters:
        response = waiter.result(timeout=10)
        assert response.status_code == 200 and response.json()["data"] == []
    # answered by the shutdown, not by their 50 s timeout
    counters = server.registry.feed_longpoll.counters("tenders")
    assert (counters.waiting, counters.answered, counters.timeouts) == (0, 4, 0), counters
    print(f"{order}: the server stopped with 4 waiters in {closed:.2f} s")
    assert closed < 30  # bounds a hang only: the goal, < 2 s, is measured by the benchmark


def test_a_waiter_whose_client_goes_away_is_released(server_factory: Callable[..., DemoServer], order: str) -> None:
    """Under waitress (``channel_request_lookahead``) a waiter notices within
    a second that its client closed the connection: its thread is free for
    other requests long before its timeout."""
    import socket

    server = server_factory(order)
    notifier = server.registry.feed_longpoll
    offset = head_offset(server)
    path = f"/api/2.5/tenders?feed=longpoll&timeout=50&offset={offset}"
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as client:
        client.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode("ascii"))
        wait_for(lambda: notifier.waiting == 1)
        closed = time.monotonic()
    # released long before its 50 s timeout, and for its client's going: a count
    wait_for(lambda: notifier.waiting == 0, timeout=30)
    released = time.monotonic() - closed
    print(f"{order}: a waiter whose client went away was released in {released:.2f} s")
    counters = notifier.counters("tenders")
    assert (counters.gone, counters.timeouts) == (1, 0), counters


def test_shutdown_of_the_app_releases_waiters(commit_app: Any) -> None:
    """``openprocurement_feed.shutdown(registry)`` alone (no server)."""
    registry = commit_app.app.registry
    answers: list[Any] = []
    thread = threading.Thread(
        target=lambda: answers.append(commit_app.get(TENDERS, {"feed": "longpoll", "timeout": "50"})), daemon=True
    )
    thread.start()
    wait_for(lambda: registry.feed_longpoll.waiting == 1)
    shutdown(registry)
    thread.join(30)  # bounds a hang only: its timeout is 50 s
    assert not thread.is_alive() and answers[0].json["data"] == []
    counters = registry.feed_longpoll.counters("tenders")
    assert (counters.waiting, counters.timeouts) == (0, 0), "answered by the shutdown, not its timeout"


def test_the_notifier_reads_nothing_while_nobody_waits(server_factory: Callable[..., DemoServer], order: str) -> None:
    server = server_factory(order)
    notifier = server.registry.feed_longpoll
    offset = head_offset(server)
    requests.get(f"{server.api_url}/tenders?feed=longpoll&timeout=0.3&offset={offset}", timeout=30)
    polls = notifier.polls
    assert polls > 0, "the notifier read the bound while the request waited"
    time.sleep(0.5)
    assert notifier.polls - polls <= 1, "the notifier kept reading with nobody waiting"


def test_longpoll_figures_in_health_and_metrics(server_factory: Callable[..., DemoServer]) -> None:
    pytest.importorskip("prometheus_client")
    server = server_factory(**{"feed.metrics_path": "/metrics", "feed.longpoll_max_waiters": "1"})
    offset = head_offset(server)
    # it waits until a write wakes it, however long the scrape takes
    url = f"{server.api_url}/tenders?feed=longpoll&timeout=30&offset={offset}"
    holder = call(url)
    wait_for(lambda: server.registry.feed_longpoll.waiting == 1)
    text = requests.get(server.url + "/metrics", timeout=10).text
    assert 'openprocurement_feed_longpoll_waiters{feed="tenders"} 1.0' in text
    assert requests.get(url, timeout=10).headers["Retry-After"] == "1"
    create(server)
    woken = holder.result().json()
    assert woken["data"]
    # at the head again, nothing written: it times out
    head = f"{server.api_url}/tenders?feed=longpoll&timeout=0.3&offset={woken['next_page']['offset']}"
    assert requests.get(head, timeout=30).json()["data"] == []
    text = requests.get(server.url + "/metrics", timeout=10).text
    assert 'openprocurement_feed_longpoll_waiters{feed="tenders"} 0.0' in text
    assert 'openprocurement_feed_longpoll_timeouts_total{feed="tenders"} 1.0' in text
    assert 'openprocurement_feed_longpoll_over_cap_total{feed="tenders"} 1.0' in text
    health = requests.get(f"{server.api_url}/feeds/health", timeout=10).json()
    (feed,) = [item for item in health["feeds"] if item["name"] == "tenders"]
    assert feed["longpoll"] == {
        "waiting": 0,
        "wakeups": 1,
        "timeouts": 1,
        "over_cap": 1,
        "answered": 3,
        "gone": 0,
        "max_waiters": 1,
    }


# -- crawlers ----------------------------------------------------------------


def test_a_longpolling_crawler_loses_nothing(server_factory: Callable[..., DemoServer], order: str) -> None:
    """Writes from several threads while a crawler long-polls at the head:
    it holds every document's last version, and it waited rather than
    polled."""
    server = server_factory(order)
    seen: dict[str, str] = {}
    client = FeedSync(
        f"{server.api_url}/tenders",
        lambda batch: seen.update({item["id"]: item["dateModified"] for item in batch.items}),
        poll_interval=5.0,  # would show as lost changes if the client polled
        longpoll=10.0,
    )
    runner = threading.Thread(target=client.run, kwargs={"follow": True}, daemon=True)
    runner.start()
    wait_for(lambda: server.registry.feed_longpoll.waiting == 1)  # caught up, waiting at the head
    expected: dict[str, str] = {}
    lock = threading.Lock()

    def writer() -> None:
        for _ in range(8):
            doc = create(server)
            patched = requests.patch(
                f"{server.api_url}/tenders/{doc['id']}", json={"data": {"title": "y"}}, timeout=10
            ).json()["data"]
            with lock:
                expected[doc["id"]] = patched["dateModified"]

    writers = [threading.Thread(target=writer) for _ in range(3)]
    for thread in writers:
        thread.start()
    for thread in writers:
        thread.join()
    try:
        wait_for(lambda: all(seen.get(key) == value for key, value in expected.items()), timeout=15)
    finally:
        client.stop()
        server.registry.feed_longpoll.stop()  # answer the client's waiting request
        runner.join(10)
        client.close()
    assert len(expected) == 24
    assert client.stats.polls < 24, f"{client.stats.polls} empty answers: the client polled"


def test_the_crawler_polls_a_server_that_ignores_longpoll(settings: dict[str, str]) -> None:
    """Upstream's servers ignore ``feed=longpoll`` and answer at once: the
    client keeps its poll interval (no hot loop)."""
    from openprocurement_feed.demo import main
    from openprocurement_feed.demo.server import ThreadedServer

    app = main({}, **settings)

    def upstream(environ: dict[str, Any], start_response: Any) -> Any:
        query = environ.get("QUERY_STRING", "")
        environ["QUERY_STRING"] = "&".join(
            part for part in query.split("&") if not part.startswith(("feed=", "timeout="))
        )
        return app(environ, start_response)

    http = ThreadedServer(upstream).start()
    client = FeedSync(f"{http.url}/api/2.5/tenders", lambda batch: None, poll_interval=0.2, longpoll=10.0)
    runner = threading.Thread(target=client.run, kwargs={"follow": True}, daemon=True)
    try:
        started = time.monotonic()
        runner.start()
        # a count of polls, then the time they took: at least the intervals
        # between them (a loaded machine only makes it longer; a hot loop
        # would take milliseconds)
        wait_for(lambda: client.stats.polls >= 6, timeout=60)
        took = time.monotonic() - started
    finally:
        client.stop()
        runner.join(10)
        client.close()
        http.close()
        shutdown(app.registry)
    assert took >= 5 * 0.2, f"6 polls in {took:.2f} s at a 0.2 s interval"


def test_without_change_streams_the_commit_notifier_reads_the_checkpoint(
    server_factory: Callable[..., DemoServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the change stream on the positions state document cannot be
    opened, the notifier reads the checkpoint instead: the waiter is still
    woken by the write."""
    from pymongo.collection import Collection
    from pymongo.errors import OperationFailure

    from openprocurement_feed.store.orders import positions_name

    server = server_factory("commit")
    create(server)
    wait_for(lambda: bool(requests.get(f"{server.api_url}/tenders", timeout=10).json()["data"]))
    offset = head_offset(server)
    opened: list[str] = []
    watch = Collection.watch

    def refuse(self: Collection[Any], *args: Any, **kwargs: Any) -> Any:
        if self.name == positions_name("tenders"):
            opened.append(self.name)
            raise OperationFailure("change streams are not supported here")
        return watch(self, *args, **kwargs)

    monkeypatch.setattr(Collection, "watch", refuse)
    waiter = call(f"{server.api_url}/tenders?feed=longpoll&timeout=20&offset={offset}")
    wait_for(lambda: server.registry.feed_longpoll.waiting == 1)
    tender = create(server)
    response = waiter.result()
    assert [item["id"] for item in response.json()["data"]] == [tender["id"]]
    counters = server.registry.feed_longpoll.counters("tenders")
    assert counters.timeouts == 0 and counters.wakeups >= 1, "woken by the write, not by its timeout"
    assert opened, "the notifier did not try a change stream"


@pytest.mark.parametrize(("watermark", "interval"), [(0.0, 0.25), (0.3, 0.25), (0.8, 0.4), (1.0, 0.5), (30.0, 0.5)])
def test_a_watermark_feeds_stamp_is_read_within_half_of_w(watermark: float, interval: float) -> None:
    """Read before stamp + W, a stamp's waiters are woken at stamp + W: the
    reads are as rare as that allows, within their bounds."""
    from openprocurement_feed.longpoll.notifier import watermark_read_interval

    assert watermark_read_interval(watermark) == interval
