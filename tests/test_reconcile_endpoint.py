"""The reconcile endpoint (SPEC G.2, G.3) through ``webtest.TestApp``, both
orders, with the follower in process: the horizon, an in-sync check in one
round, differences found exactly, the aggregates' storage against the
records computed from the feed, the fallback without aggregates, and every
malformed request a 400 JSON error that reads the database at most once."""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from pymongo import MongoClient, monitoring

from benchmarks.common import insert_public_tenders
from openprocurement_feed.demo.documents import tender
from openprocurement_feed.reconcile.items import Bound
from openprocurement_feed.reconcile.negentropy import Negentropy
from openprocurement_feed.reconcile.records import record, record_id, timestamp_us
from openprocurement_feed.reconcile.storage import VectorStorage
from openprocurement_feed.reconcile.varint import encode_varint
from openprocurement_feed.store.buckets import STATE_ID, reconcile_name
from openprocurement_feed.store.database import FeedStore
from openprocurement_feed.store.orders import STATE_ID as POSITIONS_STATE
from openprocurement_feed.store.orders import positions_name
from openprocurement_feed.store.reconcile import AggregateStorage, feed_storage, open_reconcile
from openprocurement_feed.store.state import feed_state

pytestmark = [pytest.mark.timeout(120)]

PATH = "/api/2.5/feeds/tenders/reconcile"


class Commands(monitoring.CommandListener):
    """Every command of the web's client, and the documents of its replies."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.names: list[str] = []
        self.documents = 0
        #: the pipelines of the aggregate commands sent
        self.pipelines: list[list[Any]] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        with self.lock:
            self.names.append(event.command_name)
            if event.command_name == "aggregate":
                self.pipelines.append(list(event.command.get("pipeline") or ()))

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        cursor = event.reply.get("cursor") if isinstance(event.reply, dict) else None
        if isinstance(cursor, dict):
            with self.lock:
                self.documents += len(cursor.get("firstBatch") or cursor.get("nextBatch") or ())

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass

    def take(self) -> tuple[list[str], int]:
        with self.lock:
            taken = (self.names, self.documents)
            self.names, self.documents = [], 0
        return taken


class App:
    """The demo API in one order, its follower in process, the web's store
    on a monitored client."""

    def __init__(self, settings: dict[str, str], order: str, **extra: str) -> None:
        from webtest import TestApp

        from openprocurement_feed.demo import main

        self.app = main({}, **dict(settings, **{"feed.order": order, "feed.sequencer": "thread"}, **extra))
        self.registry = self.app.registry
        self.order = order
        sequencer = self.registry.feed_sequencer
        assert sequencer is not None and sequencer.wait_ready(timeout=30)
        self.original = self.registry.feed_store
        self.commands = Commands()
        self.client: MongoClient[Any] = MongoClient(
            settings["mongodb.uri"], event_listeners=[self.commands], tz_aware=True
        )
        feed_settings = self.registry.feed_settings
        store = FeedStore(self.client, feed_settings.db_name, watermark_seconds=feed_settings.watermark_seconds)
        feed_state(self.registry).store = store
        self.store = store
        self.test = TestApp(self.app)
        self.rng = random.Random(7)

    def close(self) -> None:
        from openprocurement_feed import shutdown

        feed_state(self.registry).store = self.original
        shutdown(self.registry)
        self.client.close()

    def create(self, count: int, mode: str | None = None) -> list[str]:
        ids = []
        for _ in range(count):
            answer = self.test.post_json("/api/2.5/tenders", {"data": tender(self.rng, mode)})
            ids.append(answer.json["data"]["id"])
        return ids

    def patch(self, object_id: str) -> str:
        answer = self.test.patch_json(f"/api/2.5/tenders/{object_id}", {"data": {"title": uuid.uuid4().hex}})
        return str(answer.json["data"]["dateModified"])

    def documents(self, mode: str = "") -> dict[str, str]:
        query: dict[str, Any] = {"is_public": True}
        if mode != "_all_":
            query["is_test"] = mode == "test"
        collection = self.original.collection("tenders")
        return {doc["_id"]: doc["dateModified"] for doc in collection.find(query, {"dateModified": 1})}

    def kept(self, expected: dict[str, str], timeout: float = 30.0) -> None:
        """Wait until the keeper holds the record of every expected version
        (a write that commits later than the horizon passes its stamp is
        SPEC G.5's case: a test that compares exactly waits for it)."""
        records = self.original.db[reconcile_name("tenders")]
        wanted = {key: timestamp_us(stamp) for key, stamp in expected.items()}
        deadline = time.monotonic() + timeout
        while True:
            held = {doc["_id"]: doc.get("b") for doc in records.find({"lv": 0, "w.0": {"$exists": True}}, {"b": 1})}
            if all(held.get(key) == stamp for key, stamp in wanted.items()):
                return
            assert time.monotonic() < deadline, "the keeper did not take every version"
            time.sleep(0.05)

    def settled(
        self, expected: dict[str, str], timeout: float = 30.0, keeper: bool = True, **params: str
    ) -> dict[str, Any]:
        """Wait until the keeper holds every expected version (``keeper``),
        the GET's horizon is above them and it counts them all."""
        if keeper:
            self.kept(expected, timeout)
        latest = max((timestamp_us(stamp) for stamp in expected.values()), default=0)
        deadline = time.monotonic() + timeout
        while True:
            response = self.test.get(PATH, params=params, status="*")
            answer = dict(response.json)
            if response.status_int == 503:  # the keeper is building the aggregates
                assert response.headers["Retry-After"] == "1"
            elif answer["until"] > latest and answer["records"] == len(expected):
                return answer
            if time.monotonic() > deadline:
                raise AssertionError(f"the horizon did not pass {latest} with {len(expected)} records: {answer}")
            time.sleep(0.05)

    def post(self, body: bytes, status: int = 200, **params: str) -> Any:
        query = "&".join(f"{key}={value}" for key, value in params.items())
        return self.test.post(
            f"{PATH}?{query}", body, headers={"Content-Type": "application/octet-stream"}, status=status
        )


@pytest.fixture(params=["watermark", "commit"])
def app(request: pytest.FixtureRequest, settings: dict[str, str]) -> Iterator[App]:
    served = App(settings, str(request.param))
    yield served
    served.close()


def copy_of(versions: dict[str, str], until: int) -> VectorStorage:
    """A crawler's records of ``versions`` below ``until``."""
    items = [record(key, stamp) for key, stamp in versions.items()]
    return VectorStorage.of(item for item in items if item.timestamp < until)


def reconcile(app: App, copy: VectorStorage, until: int, **params: str) -> tuple[int, set[str], set[str]]:
    """Run a whole reconciliation: ``(rounds, have, need)`` as hex ids."""
    negentropy = Negentropy(copy, frame_size_limit=app.registry.feed_settings.reconcile_frame_size_limit)
    message: bytes | None = negentropy.initiate()
    rounds, have, need = 0, set(), set()
    while message is not None:
        rounds += 1
        answer = app.post(message, until=str(until), **params).body
        message, found_have, found_need = negentropy.reconcile_initiator(answer)
        have.update(ident.hex() for ident in found_have)
        need.update(ident.hex() for ident in found_need)
    return rounds, have, need


def test_get_answers_the_horizon_and_an_in_sync_copy_takes_one_round(app: App) -> None:
    app.create(40)
    app.create(3, mode="test")
    versions = app.documents()
    answer = app.settled(versions)
    assert answer["protocol"] == 1 and answer["frame_size_limit"] == 500_000
    app.commands.take()
    rounds, have, need = reconcile(app, copy_of(versions, answer["until"]), answer["until"])
    assert (rounds, have, need) == (1, set(), set())
    # mode=test and _all_ are other sets
    assert app.settled(app.documents("test"), mode="test")["records"] == 3
    every = app.documents("_all_")
    until = app.settled(every, mode="_all_")["until"]
    assert reconcile(app, copy_of(every, until), until, mode="_all_")[0] == 1


def test_an_in_sync_check_reads_the_aggregates_sums_not_the_records(app: App) -> None:
    """A count, whatever the machine's speed: the versions' stamps are set
    (a second apart, hours ago), so the buckets they fill are known."""
    began = datetime.now(timezone.utc) - timedelta(hours=3)
    inserted = insert_public_tenders(
        app.original.collection("tenders"), (began + timedelta(seconds=n) for n in range(2000)), random.Random(5)
    )
    versions = app.documents()
    assert len(versions) == len(inserted)
    answer = app.settled(versions)
    app.commands.take()
    rounds, have, need = reconcile(app, copy_of(versions, answer["until"]), answer["until"])
    assert (rounds, have, need) == (1, set(), set())
    names, documents = app.commands.take()
    print(f"in sync over {len(versions)} records: {documents} documents read")
    # the feed's records would be 2000 documents
    assert documents * 10 < len(versions), (names, documents)


def test_differences_are_found_exactly(app: App) -> None:
    ids = app.create(60)
    stale = {key: app.patch(key) for key in ids[10:13]}
    versions = app.documents()
    until = app.settled(versions)["until"]
    copy = dict(versions)
    missing = ids[20:24]
    for key in missing:
        del copy[key]
    old = {}
    for key in stale:
        old[key] = "2021-01-01T00:00:00+00:00"
        copy[key] = old[key]
    extra = uuid.uuid4().hex
    copy[extra] = "2022-02-02T02:02:02.020202+00:00"
    rounds, have, need = reconcile(app, copy_of(copy, until), until)
    expected_need = {record(key, versions[key]).id.hex() for key in [*missing, *stale]}
    expected_have = {record(key, stamp).id.hex() for key, stamp in [*old.items(), (extra, copy[extra])]}
    assert (need, have) == (expected_need, expected_have)
    assert rounds >= 1


def test_the_aggregates_answer_as_the_records_of_the_feed_do(app: App) -> None:
    app.create(120)
    for key in list(app.documents())[:15]:
        app.patch(key)
    versions = app.documents()
    until = app.settled(versions)["until"]
    store = app.original
    source = open_reconcile(store, store.feed_collection("tenders"), app.order, "")
    expected = feed_storage([{"_id": key, "dateModified": stamp} for key, stamp in versions.items()], until)
    with source.storage(until) as storage:
        assert isinstance(storage, AggregateStorage)
        size = storage.size()
        assert size == expected.size() == len(versions)
        assert [storage.get_item(i) for i in range(size)] == expected.items()
        rng = random.Random(3)
        for _ in range(60):
            begin = rng.randrange(size + 1)
            end = rng.randrange(begin, size + 1)
            assert storage.fingerprint(begin, end) == expected.fingerprint(begin, end)
            item = expected.get_item(rng.randrange(size))
            bound = Bound(item.timestamp, item.id[: rng.randrange(33)])
            assert storage.find_lower_bound(0, size, bound) == expected.find_lower_bound(0, size, bound)
        assert storage.find_lower_bound(0, size, Bound(2**64 - 1)) == size
    # the patched objects moved to the head: the buckets they left, emptied,
    # are deleted by the keeper's next quiet write (the collection grows with
    # the objects, not with the changes)
    records = store.db[reconcile_name("tenders")]
    deadline = time.monotonic() + 30
    while records.count_documents({"lv": {"$gt": 0}, "n": 0}):
        assert time.monotonic() < deadline, "the emptied buckets were not deleted"
        time.sleep(0.1)
    assert records.count_documents({"lv": {"$gt": 0}, "n": {"$lt": 0}}) == 0


def same_as_the_feed(app: App, versions: dict[str, str], until: int) -> None:
    """The aggregates' storage answers as the feed's records do."""
    store = app.original
    source = open_reconcile(store, store.feed_collection("tenders"), app.order, "")
    expected = feed_storage([{"_id": key, "dateModified": stamp} for key, stamp in versions.items()], until)
    with source.storage(until) as storage:
        assert isinstance(storage, AggregateStorage)
        assert storage.size() == expected.size() == len(versions)
        assert [storage.get_item(i) for i in range(storage.size())] == expected.items()
        for begin in range(0, storage.size(), 7):
            assert storage.fingerprint(begin, storage.size()) == expected.fingerprint(begin, storage.size())


def test_aggregates_of_another_layout_are_built_again_from_the_documents(
    settings: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from openprocurement_feed.commit import aggregates

    # small chunks: the build takes many batches
    monkeypatch.setattr(aggregates, "SCAN_CHUNK", 7)
    first = App(settings, "watermark")
    try:
        first.create(40)
        first.settled(first.documents())
    finally:
        first.close()
    client: MongoClient[Any] = MongoClient(settings["mongodb.uri"])
    records = client[settings["mongodb.db_name"]][reconcile_name("tenders")]
    records.update_one({"_id": STATE_ID}, {"$set": {"built": "levels:14,20,26,32,38", "lease": 0}})
    records.insert_one({"_id": "~1|5|r", "w": "r", "lv": 1, "b": 5, "n": 3})  # of the old layout
    second = App(settings, "watermark")
    try:
        # patched while the keeper builds: the build keeps the newest version
        for key in list(second.documents())[:10]:
            second.patch(key)
        versions = second.documents()
        until = second.settled(versions)["until"]
        assert records.find_one({"_id": STATE_ID})["built"].startswith("levels:17,")
        assert records.count_documents({"_id": "~1|5|r"}) == 0
        same_as_the_feed(second, versions, until)
    finally:
        second.close()
        client.close()


def test_without_aggregates_the_records_come_from_the_feed(settings: dict[str, str]) -> None:
    served = App(settings, "watermark", **{"feed.reconcile_aggregates": "false"})
    try:
        served.create(12)
        versions = served.documents()
        until = served.settled(versions, keeper=False)["until"]
        assert served.registry.feed_store.db[reconcile_name("tenders")].count_documents({}) == 0
        served.commands.take()
        assert reconcile(served, copy_of(versions, until), until)[0] == 1
        _, documents = served.commands.take()
        assert documents >= len(versions)  # the feed's rows, read whole
    finally:
        served.close()


def test_a_lagging_keeper_answers_503_with_retry_after(app: App) -> None:
    app.create(5)
    until = app.settled(app.documents())["until"]
    if app.order == "commit":  # below the checkpoint's own bound (the keeper's point lifts it)
        state = app.original.db[positions_name("tenders")].find_one({"_id": POSITIONS_STATE})
        until = state["checkpoint"].time * 1_000_000
    records = app.original.db[reconcile_name("tenders")]
    records.update_one({"_id": STATE_ID}, {"$set": {"wall": until - 1}})
    answer = app.post(Negentropy(VectorStorage.of([])).initiate(), status=503, until=str(until))
    assert answer.headers["Retry-After"] == "1"
    assert "catching up" in answer.json["errors"][0]["description"]


# -- hostile input ------------------------------------------------------------------


def message_with(*parts: bytes) -> bytes:
    return bytes([0x61]) + b"".join(parts)


@pytest.mark.parametrize(
    ("body", "params", "name", "words"),
    [
        (b"", {"until": "1000"}, "body", "empty message"),
        (bytes([0x62]), {"until": "1000"}, "body", None),  # another version: answered
        (bytes([0x10]), {"until": "1000"}, "body", "invalid protocol version"),
        (message_with(b"\x81"), {"until": "1000"}, "body", "truncated varint"),
        (
            message_with(encode_varint(5), b"\x00", encode_varint(2), encode_varint(3)),
            {"until": "1000"},
            "body",
            "id list longer",
        ),
        (
            message_with(
                encode_varint(6), b"\x01\x02", encode_varint(0), encode_varint(1), b"\x01\x01", encode_varint(0)
            ),
            {"until": "1000"},
            "body",
            "out of order",
        ),
        (message_with(encode_varint(1), b"\x00", encode_varint(7)), {"until": "1000"}, "body", "bad mode"),
        (message_with(), {}, "until", "until is required"),
        (message_with(), {"until": "-5"}, "until", "Invalid until"),
        (message_with(), {"until": "1e9"}, "until", "Invalid until"),
        (message_with(), {"until": str(2**64)}, "until", "Invalid until"),
        (message_with(), {"until": str(2**62)}, "until", "above the feed's horizon"),
    ],
)
def test_malformed_requests_are_400_json_errors_that_read_only_the_state(
    app: App, body: bytes, params: dict[str, str], name: str, words: str | None
) -> None:
    app.commands.take()
    if words is None:
        answer = app.post(body, **params)
        assert answer.body == bytes([0x61]) and answer.content_type == "application/octet-stream"
    else:
        answer = app.post(body, status=400, **params)
        error = answer.json["errors"][0]
        assert answer.json["status"] == "error" and error["name"] == name and words in error["description"]
    names, _ = app.commands.take()
    # at most the state's reads: the database's time, then the aggregates'
    # state and the checkpoint, each by its _id (no read of the feed)
    assert names == ["aggregate", "find", "find"][: len(names)], names


def test_the_state_is_read_by_id_not_by_a_union_of_whole_collections(app: App) -> None:
    """The state read names no collection to read whole: a ``$unionWith``
    made the embedded server read every position and record (a million of
    each) at every request of a reconcile."""
    app.commands.pipelines.clear()
    app.post(b"\x61", status=200, until="1000")
    assert app.commands.pipelines, "the database's time is read"
    assert not [stage for pipeline in app.commands.pipelines for stage in pipeline if "$unionWith" in stage]


def test_a_body_over_the_limit_is_refused_before_it_is_read(app: App) -> None:
    app.commands.take()
    answer = app.post(b"\x61" + b"\x00" * 10_000_000, status=400, until="1000")
    assert "over the frame size limit" in answer.json["errors"][0]["description"]
    assert app.commands.take()[0] == []


def test_a_frame_over_the_limit_and_a_feed_without_hex_ids(settings: dict[str, str]) -> None:
    served = App(settings, "watermark", **{"feed.reconcile_frame_size_limit": "4096"})
    try:
        answer = served.post(b"\x61" + b"\x00" * 5000, status=400, until="1000")
        assert "4096" in answer.json["errors"][0]["description"]
        served.create(3)
        until = served.settled(served.documents())["until"]
        collection = served.original.collection("tenders")
        served.original.save_data(collection, {"_id": "not-hex", "status": "active"}, insert=True)
        deadline = time.monotonic() + 30
        while True:
            answer = served.test.get(PATH, status="*")
            if answer.status_int == 501:
                break
            assert time.monotonic() < deadline, answer.text
            time.sleep(0.05)
        assert "32 hexadecimal digits" in answer.json["errors"][0]["description"]
        assert until > 0
    finally:
        served.close()


def test_record_ids_match_the_core(app: App) -> None:
    """The keeper's records are SPEC G.1's (the core's own functions)."""
    key = app.create(1)[0]
    versions = app.documents()
    app.settled(versions)
    doc = app.original.db[reconcile_name("tenders")].find_one({"_id": key})
    assert doc is not None
    stamp = timestamp_us(versions[key])
    assert (doc["b"], doc["r"]) == (stamp, record_id(key, stamp).hex())


def test_metrics_count_sessions_rounds_bytes_and_differences(settings: dict[str, str]) -> None:
    served = App(settings, "watermark", **{"feed.metrics_path": "/metrics"})
    try:
        ids = served.create(20)  # the copy's first message is its id list: the server sees both sides
        versions = served.documents()
        until = served.settled(versions)["until"]
        copy = dict(versions)
        del copy[ids[0]]
        rounds, _, need = reconcile(served, copy_of(copy, until), until)
        assert need == {record(ids[0], versions[ids[0]]).id.hex()}
        text = served.test.get("/metrics").text
        assert 'openprocurement_feed_reconcile_sessions_total{feed="tenders"}' in text
        assert f'openprocurement_feed_reconcile_rounds_total{{feed="tenders"}} {float(rounds)}' in text
        assert 'openprocurement_feed_reconcile_bytes_total{direction="received",feed="tenders"}' in text
        assert 'openprocurement_feed_reconcile_differences_total{feed="tenders"} 1.0' in text
    finally:
        served.close()


def test_a_scoped_feed_reconciles_its_scope(settings: dict[str, str]) -> None:
    from pyramid.config import Configurator
    from webtest import TestApp

    from openprocurement_feed import shutdown
    from openprocurement_feed.demo import includeme

    config = Configurator(settings=dict(settings, **{"feed.sequencer": "thread"}))
    config.include(includeme)
    config.add_feed("owner_tenders", path="owners/{owner}/tenders", collection="tenders", scope="owner")
    app = config.make_wsgi_app()
    try:
        test = TestApp(app)
        store = app.registry.feed_store
        collection = store.collection("tenders")
        owners = {"alice": 4, "bob": 2}
        for owner, count in owners.items():
            for _ in range(count):
                store.save_data(collection, {"_id": uuid.uuid4().hex, "status": "active", "owner": owner}, insert=True)
        path = "/api/2.5/feeds/owner_tenders/reconcile"
        answer = test.get(path, status=400)
        assert answer.json["errors"][0]["name"] == "owner"
        deadline = time.monotonic() + 30
        while True:
            found = {owner: test.get(path, params={"owner": owner}, status="*") for owner in owners}
            if all(
                response.status_int == 200
                and response.json["records"] == owners[owner]
                and response.json["source"] == "aggregates"
                for owner, response in found.items()
            ):
                break
            assert time.monotonic() < deadline, {owner: response.text for owner, response in found.items()}
            time.sleep(0.05)
        assert test.get(path, params={"owner": "nobody"}).json["records"] == 0
    finally:
        shutdown(app.registry)


def test_a_feed_whose_path_is_not_its_name_is_reconciled_at_the_url_a_client_derives(
    settings: dict[str, str],
) -> None:
    """The demo's watermark twin is named ``tenders_watermark`` and served at
    ``/tenders-watermark``: a client derives ``/feeds/tenders-watermark/
    reconcile`` from that URL (``reconcile_url``), and finds the endpoint
    there, answering for the same feed as ``/feeds/tenders_watermark/reconcile``."""
    from urllib.parse import urlsplit

    from webtest import TestApp

    from openprocurement_feed import shutdown
    from openprocurement_feed.client.reconcile import reconcile_url
    from openprocurement_feed.demo import main

    app = TestApp(
        main({}, **dict(settings, **{"feed.order": "commit", "feed.sequencer": "off", "demo.both_orders": "true"}))
    )
    try:
        store = app.app.registry.feed_store
        store.save_data(store.collection("tenders"), {"_id": "e" * 32, "status": "active"}, insert=True)
        derived = urlsplit(reconcile_url("http://localhost/api/2.5/tenders-watermark")).path
        assert derived == "/api/2.5/feeds/tenders-watermark/reconcile"
        deadline = time.monotonic() + 30
        while True:
            by_path = app.get(derived, status="*")
            by_name = app.get("/api/2.5/feeds/tenders_watermark/reconcile", status="*")
            if by_path.status_int == by_name.status_int == 200 and by_path.json["records"] == 1:
                break
            assert by_path.status_int in (200, 503), by_path.text
            assert time.monotonic() < deadline, (by_path.text, by_name.text)
            time.sleep(0.05)
        assert by_path.json["records"] == by_name.json["records"] == 1
        # a feed's own name keeps its endpoint, and an unknown one is a 404
        assert app.get("/api/2.5/feeds/tenders/reconcile", status="*").status_int in (200, 503)
        assert app.get("/api/2.5/feeds/tenders-nothing/reconcile", status=404)
    finally:
        shutdown(app.app.registry)


@pytest.mark.parametrize("aggregates", ["true", "false"])
def test_without_a_keeper_a_feed_over_the_limit_is_not_read_whole(settings: dict[str, str], aggregates: str) -> None:
    """No follower keeps the aggregates (``feed.sequencer = off``): with them
    on, a feed of more than ``feed.reconcile_feed_limit`` objects answers 503
    naming the setting, after reading one object more than the limit; at the
    limit, or with the aggregates off (the deployment chose the feed), the
    records come from the feed."""
    from webtest import TestApp

    from openprocurement_feed import shutdown
    from openprocurement_feed.demo import main

    extra = {"feed.sequencer": "off", "feed.reconcile_aggregates": aggregates, "feed.reconcile_feed_limit": "5"}
    web = TestApp(main({}, **dict(settings, **extra)))
    try:
        rng = random.Random(3)
        for _ in range(5):
            web.post_json("/api/2.5/tenders", {"data": tender(rng, None)})
        deadline = time.monotonic() + 30
        while (answer := web.get(PATH).json)["records"] < 5:  # the watermark passes them
            assert time.monotonic() < deadline, answer
            time.sleep(0.1)
        assert answer["source"] == "feed"
        web.post_json("/api/2.5/tenders", {"data": tender(rng, None)})
        deadline = time.monotonic() + 30
        while True:
            response = web.get(PATH, status="*")
            if aggregates == "false":
                assert response.status_int == 200, response.text
                if response.json["records"] == 6:
                    break
            elif response.status_int == 503:
                assert response.headers["Retry-After"] == "1"
                error = response.json["errors"][0]
                assert "feed.reconcile_feed_limit = 5" in error["description"], error
                assert "the sequencer keeps them" in error["description"], error
                body = Negentropy(VectorStorage.of([])).initiate()
                posted = web.post(
                    f"{PATH}?until={answer['until']}",
                    body,
                    headers={"Content-Type": "application/octet-stream"},
                    status="*",
                )
                assert posted.status_int == 503 and "feed.reconcile_feed_limit" in posted.text
                break
            else:
                assert response.json["records"] == 5, "over the limit, yet answered from the feed"
            assert time.monotonic() < deadline, response.text
            time.sleep(0.1)
    finally:
        shutdown(web.app.registry)
