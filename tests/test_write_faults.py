"""The demo's writes and reads under database faults, from the server's own
fail points.

One embedded server per module, started with ``--enable-test-commands``;
each fault is a ``failCommand`` aimed at the web client's ``appName``
(:data:`~openprocurement_feed.roles.WEB`), so the test's own client (another
name) counts what is stored. Every fail point is switched off at the end of
its test, failed or not. What must hold: no 500; a write the database did
not make is a 503 ``not_saved`` with ``Retry-After``; a write it did not
confirm is a 504 ``outcome_unknown``; a create retried with the same
``Idempotency-Key`` never makes a second object; every 2xx answer's change
is stored; reads answer the page or a 503 with ``Retry-After``.
"""

from __future__ import annotations

import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient

from openprocurement_feed import shutdown
from openprocurement_feed.demo import main
from openprocurement_feed.embedded.server import EmbeddedServer
from openprocurement_feed.roles import WEB
from openprocurement_feed.testing import make_settings

#: starts servers or processes of its own (make test-unit leaves it out)
pytestmark = pytest.mark.server

TENDERS = "/api/2.5/tenders"
WTIMEOUT = {
    "code": 64,
    "codeName": "WriteConcernFailed",
    "errmsg": "waiting for replication timed out",
    "errInfo": {"wtimeout": True},
}
LAUNCHER = Path(__file__).resolve().parent.parent / "ops" / "secantusd_lifetime.py"
#: Seconds the server keeps an idle transaction open.
LIFETIME = 2
#: The fail point of a client that must see none: the test's own.
OBSERVER = "write-faults-observer"

Arm = Callable[..., None]


@pytest.fixture(scope="module")
def fault_uri() -> Iterator[str]:
    """A server of this module's own that accepts ``configureFailPoint``,
    and ends a transaction left open for :data:`LIFETIME` seconds (a commit
    whose connection dropped leaves its transaction open on the server)."""
    launcher = (sys.executable, str(LAUNCHER), str(LIFETIME))
    with EmbeddedServer(extra_args=("--enable-test-commands",), launcher=launcher) as server:
        yield server.uri


@pytest.fixture(scope="module")
def observer(fault_uri: str) -> Iterator[MongoClient[Any]]:
    """The test's client: it arms the fail points and counts what is stored."""
    client: MongoClient[Any] = MongoClient(fault_uri, appname=OBSERVER, serverSelectionTimeoutMS=10_000)
    yield client
    client.close()


@pytest.fixture
def arm(observer: MongoClient[Any]) -> Iterator[Arm]:
    """``arm(commands, mode={"times": 1}, **data)``: a ``failCommand`` fail
    point on ``commands`` of the web client; off again after the test."""

    def arm_it(commands: list[str], mode: Any = None, **data: Any) -> None:
        observer.admin.command(
            {
                "configureFailPoint": "failCommand",
                "mode": mode or {"times": 1},
                "data": {"failCommands": commands, "appName": WEB, **data},
            }
        )

    try:
        yield arm_it
    finally:
        observer.admin.command({"configureFailPoint": "failCommand", "mode": "off"})


@pytest.fixture
def demo(fault_uri: str, observer: MongoClient[Any]) -> Iterator[tuple[Any, Any]]:
    """The demo API on the fault server (its own database) and that
    database as the observer sees it."""
    from webtest import TestApp

    name = f"faults_{uuid.uuid4().hex[:10]}"
    settings = make_settings(fault_uri, name, mongodb_server_selection_timeout_ms="1500")
    app = main({}, **settings)
    try:
        yield TestApp(app), observer[name]
    finally:
        shutdown(app.registry)
        observer.drop_database(name)


def post(app: Any, title: str, key: str | None = None, status: Any = "*") -> Any:
    headers = {"Idempotency-Key": key} if key is not None else {}
    return app.post_json(TENDERS, {"data": {"title": title}}, headers=headers, status=status)


def assert_json_error(response: Any, status: int, name: str) -> None:
    """``response`` is the JSON error ``name`` with ``status`` and ``Retry-After``."""
    assert response.status_int == status, response.text
    assert response.headers.get("Retry-After") == "1"
    body = response.json
    assert body["status"] == "error" and body["errors"][0]["name"] == name, body


def count(db: Any, title: str) -> int:
    return int(db.tenders.count_documents({"title": title}))


def test_wtimeout_on_commit_of_a_create_is_outcome_unknown_and_its_retry_answers_the_one_tender(
    demo: tuple[Any, Any], arm: Arm
) -> None:
    app, db = demo
    key = str(uuid.uuid4())
    arm(["commitTransaction"], writeConcernError=WTIMEOUT)
    first = post(app, "wtimeout", key)
    assert_json_error(first, 504, "outcome_unknown")
    assert "Idempotency-Key" in first.json["errors"][0]["description"]
    assert count(db, "wtimeout") == 1  # the commit was applied, unconfirmed
    again = post(app, "wtimeout", key)
    assert again.status_int == 201 and again.headers["Idempotent-Replayed"] == "true"
    assert again.json["access"]["token"]
    stored = db.tenders.find_one({"title": "wtimeout"})
    assert again.json["data"]["id"] == stored["_id"]
    assert count(db, "wtimeout") == 1
    # the token the retry got is the object's: a change with it is allowed
    patched = app.patch_json(
        f"{TENDERS}/{stored['_id']}?acc_token={again.json['access']['token']}", {"data": {"description": "d"}}
    )
    assert patched.status_int == 200


def test_wtimeout_on_commit_of_a_change_is_outcome_unknown_and_applied(demo: tuple[Any, Any], arm: Arm) -> None:
    app, db = demo
    tender = post(app, "to change").json["data"]
    arm(["commitTransaction"], writeConcernError=WTIMEOUT)
    answer = app.patch_json(f"{TENDERS}/{tender['id']}", {"data": {"description": "changed"}}, status="*")
    assert_json_error(answer, 504, "outcome_unknown")
    assert db.tenders.find_one({"_id": tender["id"]})["description"] == "changed"


@pytest.mark.parametrize(
    "error", [WTIMEOUT, dict(WTIMEOUT, code=100, codeName="UnsatisfiableWriteConcern")], ids=["64", "100"]
)
def test_a_write_concern_error_on_a_statement_aborts_the_change(
    demo: tuple[Any, Any], arm: Arm, error: dict[str, Any]
) -> None:
    app, db = demo
    tender = post(app, "statement").json["data"]
    arm(["update"], writeConcernError=error)
    answer = app.patch_json(f"{TENDERS}/{tender['id']}", {"data": {"description": "lost?"}}, status="*")
    assert_json_error(answer, 503, "not_saved")
    assert "description" not in db.tenders.find_one({"_id": tender["id"]})
    assert app.patch_json(f"{TENDERS}/{tender['id']}", {"data": {"description": "again"}}).status_int == 200
    assert db.tenders.find_one({"_id": tender["id"]})["description"] == "again"


ELECTION = [
    # (request, command, code, labels the server adds there)
    ("patch", "update", 10107, ["TransientTransactionError"]),
    ("patch", "find", 11602, ["TransientTransactionError"]),
    ("post", "insert", 10107, ["TransientTransactionError"]),
    ("post", "findAndModify", 11602, ["RetryableWriteError"]),
    ("get", "find", 10107, []),
]


@pytest.mark.parametrize("mode", [{"times": 1}, "alwaysOn"], ids=["once", "sustained"])
@pytest.mark.parametrize(("request_kind", "command", "code", "labels"), ELECTION)
def test_election_errors_answer_or_503_and_lose_nothing(
    demo: tuple[Any, Any], arm: Arm, request_kind: str, command: str, code: int, labels: list[str], mode: Any
) -> None:
    app, db = demo
    tender = post(app, "elected").json["data"]
    arm([command], mode=mode, errorCode=code, errorLabels=labels)
    if request_kind == "patch":
        answer = app.patch_json(f"{TENDERS}/{tender['id']}", {"data": {"description": "x"}}, status="*")
    elif request_kind == "post":
        answer = post(app, "created in an election", str(uuid.uuid4()))
    else:
        answer = app.get(f"{TENDERS}/{tender['id']}", status="*")
    assert answer.status_int in (200, 201, 503), answer.text
    if answer.status_int == 503:
        assert answer.headers.get("Retry-After") == "1" and answer.json["status"] == "error"
    elif request_kind == "patch":
        assert db.tenders.find_one({"_id": tender["id"]})["description"] == "x"
    elif request_kind == "post":
        assert db.tenders.find_one({"_id": answer.json["data"]["id"]}) is not None
    if mode == "alwaysOn" and request_kind != "get":
        assert answer.status_int == 503  # nothing to retry into


@pytest.mark.parametrize("mode", [{"times": 1}, "alwaysOn"], ids=["once", "sustained"])
def test_a_dropped_commit_never_makes_a_duplicate(demo: tuple[Any, Any], arm: Arm, mode: Any) -> None:
    app, db = demo
    key = str(uuid.uuid4())
    arm(["commitTransaction"], mode=mode, closeConnection=True)
    first = post(app, "dropped", key)
    assert first.status_int in (201, 504), first.text
    if first.status_int == 504:
        assert_json_error(first, 504, "outcome_unknown")
    else:
        assert count(db, "dropped") == 1
    arm(["commitTransaction"], mode="off")
    # A commit whose result is unknown leaves its transaction open on the
    # server until its lifetime ends: meanwhile a retry is the IETF draft's
    # 409 (in progress), then it creates the tender, once.
    deadline = time.monotonic() + 10 * LIFETIME + 20
    while True:
        again = post(app, "dropped", key)
        assert count(db, "dropped") <= 1
        if again.status_int != 409 or time.monotonic() > deadline:
            break
        assert "Idempotency-Key" in again.json["errors"][0]["description"]
        time.sleep(0.2)
    assert again.status_int == 201, again.text
    assert count(db, "dropped") == 1
    assert db.tenders.find_one({"title": "dropped"})["_id"] == again.json["data"]["id"]


@pytest.mark.parametrize("command", ["find", "aggregate"])
def test_max_time_ms_expired_on_a_feed_read_is_503(demo: tuple[Any, Any], arm: Arm, command: str) -> None:
    app, _ = demo
    post(app, "listed")
    arm([command], mode="alwaysOn", errorCode=50)
    feed = app.get(TENDERS, status="*")
    assert feed.status_int in (200, 503), feed.text
    if command == "find":
        assert_json_error(app.get(f"{TENDERS}?offset=1.0", status="*"), 503, "database")
    if feed.status_int == 503:
        assert_json_error(feed, 503, "database")


def test_any_other_database_error_of_a_read_is_503(demo: tuple[Any, Any], arm: Arm) -> None:
    app, _ = demo
    tender = post(app, "read").json["data"]
    arm(["find"], mode="alwaysOn", errorCode=8000)  # an error the server has no name for
    assert_json_error(app.get(f"{TENDERS}/{tender['id']}", status="*"), 503, "database")
    assert_json_error(app.get(TENDERS, status="*"), 503, "database")


def test_a_key_answers_the_object_it_created(demo: tuple[Any, Any]) -> None:
    app, db = demo
    key = f'"{uuid.uuid4()}"'  # the draft's structured-field form
    first = post(app, "keyed", key)
    again = post(app, "keyed", key)
    assert first.status_int == again.status_int == 201
    assert "Idempotent-Replayed" not in first.headers and again.headers["Idempotent-Replayed"] == "true"
    assert again.json["data"]["id"] == first.json["data"]["id"]
    assert again.json["access"] == first.json["access"]
    assert again.headers["Location"] == first.headers["Location"]
    assert count(db, "keyed") == 1
    # another key, or none, is another object
    assert post(app, "keyed", "another").json["data"]["id"] != first.json["data"]["id"]
    assert count(db, "keyed") == 2


@pytest.mark.parametrize("key", ["", "has space", "x" * 129, "caf\u00e9", 'a"b'])
def test_a_malformed_key_is_400(demo: tuple[Any, Any], key: str) -> None:
    app, db = demo
    answer = app.post_json(
        TENDERS, {"data": {"title": "bad key"}}, headers={"Idempotency-Key": key.encode().decode("latin-1")}, status="*"
    )
    assert answer.status_int == 400
    error = answer.json["errors"][0]
    assert (error["location"], error["name"]) == ("header", "Idempotency-Key")
    assert count(db, "bad key") == 0


def test_a_key_with_another_body_is_422(demo: tuple[Any, Any]) -> None:
    app, db = demo
    post(app, "first body", "reused")
    answer = post(app, "second body", "reused")
    assert answer.status_int == 422 and answer.json["errors"][0]["name"] == "Idempotency-Key"
    assert count(db, "second body") == 0


@pytest.fixture
def host_store(fault_uri: str, observer: MongoClient[Any]) -> Iterator[Any]:
    """A host's store on the fault server, its client named as the web one."""
    from openprocurement_feed.settings import parse_settings
    from openprocurement_feed.store.database import FeedStore

    name = f"host_{uuid.uuid4().hex[:10]}"
    store = FeedStore.from_settings(
        parse_settings(make_settings(fault_uri, name, mongodb_server_selection_timeout_ms="1500"))
    )
    try:
        yield store
    finally:
        store.close()
        observer.drop_database(name)


def saved(store: Any, title: str, **session: Any) -> dict[str, Any]:
    result: dict[str, Any] = store.save_data(
        store.collection("tenders"), {"_id": uuid.uuid4().hex, "title": title}, insert=True, **session
    )
    return result


@pytest.mark.parametrize(
    ("data", "expected", "stored"),
    [
        (dict(writeConcernError=WTIMEOUT), "SaveOutcomeUnknown", 1),
        (dict(errorCode=10107, errorLabels=["RetryableWriteError"]), "NotSaved", 0),
        (dict(errorCode=50), "NotSaved", 0),
        (dict(closeConnection=True), "SaveOutcomeUnknown", 0),
    ],
    ids=["wtimeout", "not-writable-primary", "max-time", "dropped"],
)
def test_a_hosts_save_raises_the_stores_errors(
    host_store: Any, observer: MongoClient[Any], arm: Arm, data: dict[str, Any], expected: str, stored: int
) -> None:
    import openprocurement_feed as package

    arm(["findAndModify"], mode="alwaysOn", **data)
    with pytest.raises(package.SaveError) as raised:
        saved(host_store, "host")
    assert type(raised.value).__name__ == expected
    assert raised.value.error is raised.value.__cause__
    assert observer[host_store.db.name].tenders.count_documents({"title": "host"}) == stored


def test_with_transaction_still_retries_a_transient_statement(host_store: Any, arm: Arm) -> None:
    from openprocurement_feed import NotSaved

    arm(["update"], mode={"times": 1}, errorCode=112, errorLabels=["TransientTransactionError"])
    attempts: list[NotSaved] = []

    def write(session: Any) -> dict[str, Any]:
        try:
            return saved(host_store, "in transaction", session=session)
        except NotSaved as error:
            attempts.append(error)
            raise

    with host_store.client.start_session() as session:
        result = session.with_transaction(write)
    assert len(attempts) == 1 and attempts[0].has_error_label("TransientTransactionError")
    assert host_store.collection("tenders").find_one({"_id": result["_id"]})["title"] == "in transaction"


def test_concurrent_creates_with_one_key_make_one_object(fault_uri: str, observer: MongoClient[Any]) -> None:
    """Creates racing with the same key (each transaction held open for a
    while): one object; every other answer is that object or a 409."""
    import threading

    from webtest import TestApp

    name = f"race_{uuid.uuid4().hex[:10]}"
    app = main({}, **make_settings(fault_uri, name, demo_write_delay_ms="30-60"))
    key = str(uuid.uuid4())
    barrier = threading.Barrier(6)
    answers: list[Any] = []

    def create() -> None:
        client = TestApp(app)
        barrier.wait(timeout=30)
        answers.append(post(client, "raced", key))

    threads = [threading.Thread(target=create) for _ in range(6)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert len(answers) == 6
        assert {answer.status_int for answer in answers} <= {201, 409}, [answer.text for answer in answers]
        created = {answer.json["data"]["id"] for answer in answers if answer.status_int == 201}
        assert len(created) == 1
        assert observer[name].tenders.count_documents({"title": "raced"}) == 1
    finally:
        shutdown(app.registry)
        observer.drop_database(name)


@pytest.mark.parametrize(
    "data",
    [dict(errorCode=50), dict(errorCode=10107), dict(closeConnection=True)],
    ids=["max-time", "not-writable-primary", "dropped"],
)
def test_health_and_readiness_answer_under_a_read_fault(demo: tuple[Any, Any], arm: Arm, data: dict[str, Any]) -> None:
    app, _ = demo
    post(app, "healthy")
    arm(["find", "aggregate", "count", "ping", "hello", "isMaster"], mode="alwaysOn", **data)
    for path in ("/api/2.5/feeds/health", "/api/2.5/feeds/health/ready"):
        answer = app.get(path, status="*")
        assert answer.status_int in (200, 503), (path, answer.text)
        if answer.status_int == 503:
            assert answer.headers.get("Retry-After") and answer.json["status"] == "error", (path, answer.text)


def test_the_openapi_document_names_the_key_and_the_fault_answers(demo: tuple[Any, Any]) -> None:
    app, _ = demo
    create = app.get("/api/2.5/feeds/openapi.json").json["paths"][TENDERS]["post"]
    (header,) = [p for p in create["parameters"] if p["in"] == "header"]
    assert header["name"] == "Idempotency-Key" and header["schema"]["maxLength"] >= 128
    assert "Idempotent-Replayed" in create["responses"]["201"]["headers"]
    assert "outcome_unknown" in create["responses"]["504"]["description"]
    assert "not_saved" in create["responses"]["503"]["description"]


@pytest.fixture
def demo_url(fault_uri: str, observer: MongoClient[Any]) -> Iterator[tuple[str, Any]]:
    """The demo API on the fault server, served over HTTP on loopback, and
    its database as the observer sees it."""
    from webtest.http import StopableWSGIServer

    name = f"faults_{uuid.uuid4().hex[:10]}"
    settings = make_settings(fault_uri, name, mongodb_server_selection_timeout_ms="1500")
    app = main({}, **settings)
    server = StopableWSGIServer.create(app, host="127.0.0.1")
    try:
        yield server.application_url.rstrip("/") + "/api/2.5", observer[name]
    finally:
        server.shutdown()
        shutdown(app.registry)
        observer.drop_database(name)


def test_sample_creates_are_retried_through_an_election_and_never_doubled(demo_url: tuple[str, Any], arm: Arm) -> None:
    from openprocurement_feed.demo.load import create_objects, create_session

    url, db = demo_url
    session = create_session()
    retried: list[int | None] = []
    # urllib3 keeps the attempts it retried on the final response
    session.hooks["response"].append(
        lambda response, **_: retried.extend(h.status for h in response.raw.retries.history)
    )
    arm(["insert"], mode={"times": 2}, errorCode=91, errorLabels=["RetryableWriteError"])
    ids = create_objects(url, "tenders", 3, seed=1, session=session)
    # the fault struck: creates answered 503 (the fail point twice, then the
    # client's server selection after the state-change error) and were sent again
    assert retried.count(503) >= 2, retried
    assert len(ids) == len(set(ids)) == 3
    assert db.tenders.count_documents({}) == 3


def test_a_sample_create_that_keeps_failing_is_a_clear_error(demo_url: tuple[str, Any], arm: Arm) -> None:
    from openprocurement_feed.demo.load import CreateFailed, create_objects, create_session

    url, db = demo_url
    arm(["insert"], mode="alwaysOn", errorCode=91, errorLabels=["RetryableWriteError"])
    with pytest.raises(CreateFailed, match=r"creating a sample tender failed: HTTP 503"):
        create_objects(url, "tenders", 1, seed=1, session=create_session(retries=1))
    assert db.tenders.count_documents({}) == 0


@pytest.mark.parametrize("command", ["find", "aggregate"])
def test_an_election_during_a_first_page_or_a_reconcile_state_read_is_503(
    demo: tuple[Any, Any], arm: Arm, command: str
) -> None:
    """A process's first page (its search for the lowest key, many small
    finds) and the reconcile endpoint's state reads (the database's time,
    then two finds by _id) meet an election: a 503 JSON error with
    Retry-After, never a 500; the same requests answer once it is over."""
    app, _ = demo
    post(app, "first")
    arm([command], mode="alwaysOn", errorCode=10107)
    answers = [
        app.get(TENDERS + "?limit=5", status="*"),
        app.post(
            "/api/2.5/feeds/tenders/reconcile?until=1000",
            b"\x61",
            status="*",
            headers={"Content-Type": "application/octet-stream"},
        ),
    ]
    if command == "find":
        assert all(answer.status_int == 503 for answer in answers), [answer.text for answer in answers]
    for answer in answers:
        assert answer.status_int in (200, 503), answer.text
        if answer.status_int == 503:
            assert answer.headers.get("Retry-After") == "1" and answer.json["status"] == "error"
    arm([command], mode="off")
    assert app.get(TENDERS + "?limit=5").status_int == 200
