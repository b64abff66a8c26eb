"""The fault matrix's fast subset, through the library the command runs.

Each kind of fault once, on its most exposed target, in the order where it
matters (the delayed commit in both): the demo app serves the seed's load on
a module's own embedded server started with test commands, the fail point
is aimed by ``appName`` at one client. What must hold in every cell: no
acknowledged write lost, no duplicate from a retried create, no 5xx but
503/504 with Retry-After, reads answered again within 10 s of the fault's
end. The commit delayed past W loses writes in the watermark order, and the
health verdict turns ``violated``; the commit order loses nothing, and its
verdict is ``at-risk`` while the sequencer cannot follow.

The cells' fail point commands and the measures are checked on their own
first (no server).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from pymongo.errors import PyMongoError

from openprocurement_feed.embedded.server import EmbeddedServer
from openprocurement_feed.faults import measure
from openprocurement_feed.faults.cells import LONGPOLL, SEQUENCER, WEB, Cell, fast_matrix, full_matrix, select
from openprocurement_feed.faults.load import Ack, Answer
from openprocurement_feed.faults.result import BROKEN, EXPECTED, KEPT, MISSED, CellResult
from openprocurement_feed.faults.run import MatrixConfig, run_matrix
from openprocurement_feed.faults.strikes import command_log, strikes, struck_by

# -- the cells and the measures, alone ------------------------------------------


def test_a_cell_carries_the_labels_a_real_server_adds() -> None:
    commit = Cell("election", WEB, "commitTransaction", 10107).fail_point("web-app")
    assert commit == {
        "mode": {"times": 3},
        "data": {
            "failCommands": ["commitTransaction"],
            "appName": "web-app",
            "errorCode": 10107,
            "errorLabels": ["RetryableWriteError"],
        },
    }
    assert Cell("election", WEB, "update", 91).labels() == ["TransientTransactionError"]
    assert Cell("election", SEQUENCER, "getMore", 189).labels() == ["ResumableChangeStreamError"]
    assert Cell("election", WEB, "find", 11602).labels() == []
    wce = Cell("write-concern", WEB, "update", 64, sustained=True).fail_point("x")
    assert wce["mode"] == "alwaysOn" and wce["data"]["writeConcernError"]["errInfo"] == {"wtimeout": True}
    assert Cell("slow", WEB, "commitTransaction").fail_point("x")["data"]["blockConnection"] is True
    assert Cell("dropped", WEB, "find").fail_point("x")["data"]["closeConnection"] is True


def test_the_matrix_has_every_kind_and_filters_by_words() -> None:
    cells = full_matrix()
    assert {cell.kind for cell in cells} == {"election", "dropped", "write-concern", "max-time", "history-lost", "slow"}
    assert len({cell.name for cell in cells}) == len(cells)
    assert {cell.code for cell in cells if cell.kind == "election"} == {10107, 11602, 189, 91}
    assert cells[-1].delayed_commit and not cells[0].delayed_commit
    assert {cell.kind for cell in fast_matrix()} == {cell.kind for cell in cells}
    chosen = select(cells, ["election sequencer:getMore"])
    assert [cell.sustained for cell in chosen] == [False, True]
    assert select(cells, ["nothing-like-this"]) == []


def test_the_measures_of_a_cell() -> None:
    answers = [
        Answer("feed", 200, 0.0, 0.1),
        Answer("feed", 503, 0.2, 0.3, bare=False),
        Answer("patch", 500, 0.4, 0.5, bare=True),
        Answer("feed", 200, 1.0, 3.5),
        Answer("create", 201, 4.0, 4.2),
        Answer("health", 503, 4.0, 4.1, bare=True),  # the violated verdict
        Answer("health", 200, 4.1, 4.2),
    ]
    assert measure.status_counts(answers) == {"200": 2, "201": 1, "500": 1, "503": 1}
    failed = Answer("health", 503, 4.2, 4.3, bare=False)  # a database error, with Retry-After
    assert measure.status_counts([*answers, failed])["503"] == 2
    assert measure.bare_errors(answers) == 1  # the health view's violated 503 aside
    assert measure.longest_unanswered(answers, 0.0, 4.0) == 3.4
    assert measure.recovery(answers, 0.9) == 3.3
    assert measure.recovery(answers, 4.5) is None
    acks = [Ack("a", "2026-01-01T00:00:02", 1.0), Ack("b", "2026-01-01T00:00:02", 1.0), Ack("c", "x", 1.0)]
    finals = {"a": "2026-01-01T00:00:03", "b": "2026-01-01T00:00:01"}
    saw = {("a", "2026-01-01T00:00:03")}
    assert measure.lost_writes(acks, finals, [lambda i, d: (i, d) in saw]) == ["b", "c"]
    assert measure.duplicates(["k1", "k2"], ["m k1", "m k1", "m k2", "m k3", "m k3"], "m ") == 1
    verdicts = [(1.0, "ok"), (2.0, "violated"), (5.0, "at-risk")]
    assert measure.worst_verdict(verdicts, 0.0, 3.0) == "violated"
    assert measure.worst_verdict(verdicts, 3.0, 4.0) is None


def test_a_logged_command_counts_for_the_fault_that_failed_it() -> None:
    election = Cell("election", WEB, "find", 10107)
    failed = {"app": "web", "command": "find", "failed": True, "code": 10107}
    assert struck_by(election, failed)
    assert not struck_by(election, {**failed, "code": 91}) and not struck_by(election, {**failed, "command": "insert"})
    closed = {"app": "web", "command": "find", "failed": True, "errtype": "AutoReconnect"}
    assert struck_by(Cell("dropped", WEB, "find"), closed)
    assert not struck_by(Cell("dropped", WEB, "find"), {**closed, "errtype": "OperationFailure"})
    concern = Cell("write-concern", WEB, "commitTransaction", 64)
    assert struck_by(concern, {"command": "commitTransaction", "wce": 64})
    assert struck_by(concern, {"command": "commitTransaction", "failed": True, "code": 64})
    slow = Cell("slow", WEB, "find")
    assert struck_by(slow, {"command": "find", "ms": 3000.4}) and not struck_by(slow, {"command": "find", "ms": 1200})
    assert strikes(election, "web", [failed, {**failed, "app": "other"}, failed]) == 2


def test_the_command_log_is_off_without_its_variable_and_never_raises(tmp_path: Any) -> None:
    from openprocurement_feed.roles import COMMAND_LOG_ENV, CommandLog, command_listeners

    assert command_listeners("web", {}) == []
    (listener,) = command_listeners("web", {COMMAND_LOG_ENV: str(tmp_path / "commands.jsonl")})
    assert isinstance(listener, CommandLog) and listener.app_name == "web"
    CommandLog(str(tmp_path), "web")._write("find", 1.0, failed=True)  # a folder: dropped, not raised


def _result(**changes: object) -> CellResult:
    values: dict[str, object] = dict(
        cell="slow web:commitTransaction x3",
        kind="slow",
        target="web",
        command="commitTransaction",
        order="watermark",
        sustained=False,
        delayed_commit=True,
        answers={"200": 5, "504": 1},
        bare_errors=0,
        acknowledged=5,
        lost=2,
        lost_ids=["a", "b"],
        duplicates=0,
        longest_unanswered_s=3.0,
        recovery_s=0.5,
        verdict="violated",
    )
    values.update(changes)
    return CellResult(**values).judge()  # type: ignore[arg-type]


def test_a_cell_is_judged_by_the_promise() -> None:
    assert _result().outcome == EXPECTED
    assert _result(verdict="ok").outcome == BROKEN
    assert _result(verdict="ok").problems == ["2 acknowledged write(s) lost while the health verdict stayed ok"]
    assert _result(order="commit").outcome == BROKEN
    assert _result(delayed_commit=False).outcome == EXPECTED  # any commit past W, said so
    assert _result(lost=0, lost_ids=[]).outcome == KEPT
    assert _result(answers={"500": 1}, lost=0).problems == ["1 answer(s) 5xx other than 503 and 504"]
    assert _result(lost=0, recovery_s=None).outcome == BROKEN
    assert _result(lost=0, duplicates=1).outcome == BROKEN


# -- the fast subset against the demo, on a real server ---------------------------


@pytest.fixture(scope="module")
def fault_uri() -> Iterator[str]:
    """This module's own server, with ``configureFailPoint``."""
    with EmbeddedServer(extra_args=("--enable-test-commands",)) as server:
        yield server.uri


@pytest.mark.server
def test_the_driver_sees_each_kind_of_fault_strike_the_client_it_aims_at(fault_uri: str) -> None:
    """A client opened while the command log is on logs what each fault
    failed; another client's commands and a command nobody sends count
    nothing; after the block the environment is as it was."""
    import os

    from openprocurement_feed.faults.failpoint import FailPoint
    from openprocurement_feed.roles import COMMAND_LOG_ENV, open_client

    before = os.environ.get(COMMAND_LOG_ENV)
    fail = FailPoint(fault_uri)
    with command_log() as log:
        aimed = open_client(fault_uri, "aimed-client", 5000, role=True)
        other = open_client(fault_uri, "other-client", 5000, role=True)
        try:
            tenders = aimed.faults_strikes.tenders
            cells = [
                (Cell("election", WEB, "find", 11602), lambda: tenders.find_one({})),
                (Cell("dropped", WEB, "insert"), lambda: tenders.insert_one({})),
                (Cell("write-concern", WEB, "insert", 64), lambda: tenders.insert_one({})),
                (Cell("max-time", WEB, "find", 50), lambda: tenders.find_one({})),
            ]
            for cell, command in cells:
                # the error of the cell before may have marked the server
                # unknown: the next command waits for the client to find it
                # again (longer than its selection timeout on a busy machine)
                reachable(aimed)
                mark = log.mark()
                with fail.armed(cell.fail_point("aimed-client")):
                    with pytest.raises(PyMongoError):
                        command()
                    other.faults_strikes.tenders.find_one({})  # not aimed at: not failed
                    other.faults_strikes.tenders.insert_one({})
                assert strikes(cell, "aimed-client", log.since(mark)) >= 1, cell.name
                assert strikes(cell, "other-client", log.since(mark)) == 0, cell.name
            nobody = Cell("election", LONGPOLL, "findAndModify", 10107)
            reachable(aimed)
            mark = log.mark()
            with fail.armed(nobody.fail_point("aimed-client")):
                tenders.find_one({})
                tenders.insert_one({})
            assert strikes(nobody, "aimed-client", log.since(mark)) == 0
        finally:
            fail.close()
            aimed.drop_database("faults_strikes")
            aimed.close()
            other.close()
    assert os.environ.get(COMMAND_LOG_ENV) == before


def reachable(client: Any, timeout: float = 60.0) -> None:
    """Wait until ``client`` answers a ping, within ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            client.admin.command("ping")
            return
        except PyMongoError:
            assert time.monotonic() < deadline, "the client did not find its server again"
            time.sleep(0.05)


def _run(
    uri: str,
    order: str,
    cells: list[Cell],
    settle: float,
    create_every: int = 4,
    hold_until: dict[str, str] | None = None,
) -> list[CellResult]:
    # the module's server is thrown away: no drop (it would wait for a
    # transaction a dropped commit left open)
    config = MatrixConfig(
        cells=tuple(cells),
        orders=(order,),
        hold=1.0,
        strike_timeout=3.0,  # the cell aimed at a command nobody sends waits that long
        settle=settle,
        create_every=create_every,
        uri=uri,
        drop=False,
        hold_until=hold_until or {},
    )
    return run_matrix(config)


def _assert_kept(result: CellResult) -> None:
    where = f"[{result.order}] {result.cell}: {result.answers}"
    assert result.lost == 0, where + f" lost {result.lost_ids}"
    assert result.duplicates == 0, where
    assert not [status for status in result.answers if status.startswith("5") and status not in ("503", "504")], where
    assert result.answers.get("none", 0) == 0 and result.bare_errors == 0, where
    assert result.recovery_s is not None and result.recovery_s <= measure.RECOVERY_LIMIT, where
    assert result.outcome == KEPT, where + f" {result.problems}"
    assert result.struck is not None and result.struck >= 1, where + " the fault struck"


@pytest.mark.slow
@pytest.mark.server
def test_the_watermark_order_loses_a_commit_delayed_past_w_and_says_so(fault_uri: str) -> None:
    cells = [Cell("write-concern", WEB, "commitTransaction", 64), Cell("slow", WEB, "commitTransaction")]
    # creates only: a held commit's tender is not patched again after it,
    # so each one a crawler passed is lost for good
    *kept, late = _run(fault_uri, "watermark", cells, settle=4.0, create_every=1)
    for result in kept:
        _assert_kept(result)
    assert late.lost > 0 and late.verdict == "violated", (late.answers, late.lost_ids, late.verdict)
    assert late.duplicates == 0 and late.outcome == EXPECTED, late.problems
    assert late.struck is not None and late.struck >= 1, "the held commits took longer than the block"


@pytest.mark.slow
@pytest.mark.server
def test_the_commit_order_keeps_every_write_under_each_kind_of_fault(fault_uri: str) -> None:
    cells = [
        Cell("election", WEB, "commitTransaction", 10107),
        Cell("dropped", WEB, "commitTransaction"),
        Cell("election", SEQUENCER, "update", 11602, sustained=True),
        Cell("max-time", WEB, "find", 50, sustained=True),
        Cell("history-lost", SEQUENCER, "getMore", 286),
        Cell("slow", WEB, "commitTransaction"),
        # aimed at a command its client never sends: nothing to prove
        Cell("election", LONGPOLL, "insert", 10107),
    ]
    # The sequencer's outage shows in the health view while it lasts: its
    # writes fail (a fault on its stream's getMore alone is resumed by the
    # driver, whose reopened stream's first batches keep it following), so
    # the fault is held until the view shows it, and the crawlers get that
    # long to catch up.
    outage = cells[2].name
    *results, nobody = _run(fault_uri, "commit", cells, settle=15.0, hold_until={outage: "at-risk"})
    for result in results:
        _assert_kept(result)
    assert results[2].verdict == "at-risk", results[2]
    assert nobody.struck == 0 and nobody.outcome == MISSED, (nobody.struck, nobody.problems)


def _wait_for(check: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what}: not within {timeout:g} s"
        time.sleep(0.1)


@pytest.mark.server
def test_the_health_view_and_the_metrics_show_a_failing_sequencer_while_it_fails(fault_uri: str) -> None:
    from webtest import TestApp

    from openprocurement_feed import shutdown
    from openprocurement_feed.demo import main
    from openprocurement_feed.faults.failpoint import FailPoint
    from openprocurement_feed.roles import SEQUENCER as SEQUENCER_APP
    from openprocurement_feed.testing import make_settings

    settings = make_settings(
        fault_uri,
        "health_" + uuid.uuid4().hex[:8],
        feed_order="commit",
        feed_sequencer="thread",
        feed_metrics_path="/metrics",
    )
    app = main({}, **settings)
    fail = FailPoint(fault_uri)
    try:
        assert app.registry.feed_sequencer.wait_ready(timeout=30)
        web = TestApp(app)
        health = "/api/2.5/feeds/health"

        def tenders() -> dict[str, Any]:
            body = web.get(health, expect_errors=True).json
            return next(feed for feed in body["feeds"] if feed["name"] == "tenders")

        assert tenders()["verdict"] == "ok" and "failing" not in tenders()["watcher"]
        # its reads fail, and so does every reopening of its stream (the
        # driver resumes a stream whose getMore alone fails)
        outage = {
            "mode": "alwaysOn",
            "data": {"failCommands": ["getMore", "aggregate"], "errorCode": 11602, "appName": SEQUENCER_APP},
        }
        with fail.armed(outage):
            _wait_for(lambda: "failing" in tenders()["watcher"], "the failing sequencer in the health view")
            feed = tenders()
            assert feed["verdict"] == "at-risk", feed
            assert "has not returned" in feed["reason"] or "InterruptedDueToReplStateChange" in feed["reason"], feed
            _wait_for(
                lambda: "InterruptedDueToReplStateChange" in tenders()["reason"],
                "the driver's error in the health view",
            )
            metrics = web.get("/metrics").text
            assert 'openprocurement_feed_verdict{feed="tenders",verdict="at-risk"} 1.0' in metrics
        _wait_for(lambda: tenders()["verdict"] == "ok", "the verdict back to ok after the fault")
        assert "failing" not in tenders()["watcher"]
    finally:
        fail.close()
        shutdown(app.registry)


@pytest.mark.server
def test_a_patch_whose_read_is_held_past_a_competing_commit_dates_its_version_after_it(fault_uri: str) -> None:
    """The demo's patch reads the object inside its transaction; held 1.5 s
    there (``slow web:find``), it reads the version another patch committed
    meanwhile, and its own version must be dated after that one (the
    matrix counted the other patch's acknowledged write lost when the held
    one kept the ``dateModified`` of its start)."""
    import threading

    from webtest import TestApp

    from openprocurement_feed import shutdown
    from openprocurement_feed.demo import main
    from openprocurement_feed.faults.failpoint import FailPoint
    from openprocurement_feed.roles import app_name_of
    from openprocurement_feed.testing import make_settings

    app = main({}, **make_settings(fault_uri, "held_" + uuid.uuid4().hex[:8], feed_order="watermark"))
    fail = FailPoint(fault_uri)
    try:
        tender = TestApp(app).post_json("/api/2.5/tenders", {"data": {"title": "first"}}, status=201).json["data"]
        url = f"/api/2.5/tenders/{tender['id']}"
        web_name = app_name_of(app.registry.feed_store.client)
        held: dict[str, Any] = {}

        def patch_held() -> None:
            held.update(TestApp(app).patch_json(url, {"data": {"title": "held"}}).json["data"])

        def find_is_held() -> bool:
            ops = fail.client.admin.command("currentOp").get("inprog", [])
            return any(
                "find" in (op.get("command") or {})
                and ((op.get("clientMetadata") or {}).get("application") or {}).get("name") == web_name
                for op in ops
            )

        block = {"failCommands": ["find"], "appName": web_name, "blockConnection": True, "blockTimeMS": 1500}
        with fail.armed({"mode": {"times": 1}, "data": block}):
            thread = threading.Thread(target=patch_held, daemon=True)
            thread.start()
            _wait_for(find_is_held, "the patch's read held by the fail point")
            quick = TestApp(app).patch_json(url, {"data": {"description": "quick"}}).json["data"]
            thread.join(timeout=30)
        assert held, "the held patch was not answered"
        stored = TestApp(app).get(url).json["data"]
        # the held patch read the quick one's version and kept its change
        assert stored["title"] == "held" and stored["description"] == "quick", stored
        assert stored["dateModified"] == held["dateModified"] > quick["dateModified"], (held, quick)
    finally:
        fail.close()
        shutdown(app.registry)
