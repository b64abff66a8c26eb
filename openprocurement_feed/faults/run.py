"""Running the matrix: one order's app on a database with test commands,
the load, and every cell in turn.

For each order the demo app (``feed.order``, ``feed.sequencer = thread``)
is served on 127.0.0.1 by waitress on a fresh database; tenders are
created, then writers (transactions held open ``demo.write_delay_ms``), a
crawler following ``next_page``, a long-poll crawler and a read probe run
for the whole order. Each cell (:func:`run_cell`):

1. arms its fault for ``hold`` seconds (a transient one fails its next
   ``times`` commands in that time; ``hold_until`` keeps it armed until a
   given verdict shows), and past them, up to ``strike_timeout`` seconds,
   until it has struck once (a client that sends its command seldom, a
   long poll's ``getMore``, one still waiting in server selection after
   the cell before), then clears it;
2. waits until a read and a write started after the fault's end were
   answered (at most ``recover_timeout`` seconds);
3. pauses the writers and lets the crawlers catch up (``W`` plus
   ``settle`` seconds at most: a change that shows later than that is
   counted lost), then compares each write acknowledged
   during the cell with the database and with what each crawler got, and
   counts the commands the fault failed on the client it aimed at
   (:mod:`.strikes`: the clients are in this process, and log their
   failed commands while the matrix runs);
4. resumes the writers for the next cell.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pymongo
from pymongo.errors import PyMongoError

from ..demo.auth import PACKAGED_AUTH_FILE
from ..demo.load import Access
from ..race.crawler import Crawler
from ..race.feed import FeedClient
from ..race.load import create_many
from ..store.state import feed_state
from . import measure
from .cells import Cell
from .failpoint import FailPoint
from .load import MARKER, FaultWriter, Log, Pausable, ReadProbe
from .result import CellResult
from .strikes import CommandLogFile, command_log, strikes

Progress = Callable[[str], None]
ORDERS = ("watermark", "commit")
#: The health view's lag window in the matrix's app (s): shorter than a cell.
LAG_WINDOW = 5.0


@dataclass(frozen=True)
class MatrixConfig:
    """The load and the timing of a matrix run.

    :param uri: a database with test commands enabled; None starts the
        embedded server with ``--enable-test-commands``.
    :param drop: drop each order's database after its cells (at ``uri``;
        the embedded server's folder goes away with it). A transaction a
        fault left open holds the database until the server ends it, and
        the embedded server answers nothing else while a drop waits for it:
        a throwaway server need not be cleaned.
    """

    cells: tuple[Cell, ...]
    orders: tuple[str, ...] = ORDERS
    watermark: float = 1.0
    hold: float = 2.0
    #: seconds a fault that has not struck yet stays armed past ``hold``
    #: (with the command log only; 0: never)
    strike_timeout: float = 15.0
    recover_timeout: float = 20.0
    settle: float = 10.0
    writers: int = 4
    rate: float = 5.0
    #: one write in this many is a create (1: creates only)
    create_every: int = 4
    tenders: int = 30
    write_delay: str = "5-40"
    longpoll: float = 5.0
    uri: str | None = None
    drop: bool = True
    extra: dict[str, str] = field(default_factory=dict)
    #: cell name → a verdict: that cell's fault stays armed past ``hold``
    #: until the read probe sees the verdict (at most ``recover_timeout``
    #: seconds), for a check that a fault shows in the health view whatever
    #: the driver's own retries make of its timing
    hold_until: dict[str, str] = field(default_factory=dict)


def app_names(registry: Any) -> dict[str, str]:
    """The ``appName`` of each role's client in the app of ``registry``."""
    from ..roles import ROLES, app_name_of

    names = dict(ROLES)
    web = app_name_of(registry.feed_store.client)
    if web:
        names["web"] = web
    return names


class OrderRun:
    """One order's app, load and instruments (:meth:`start`, :meth:`close`)."""

    def __init__(
        self,
        config: MatrixConfig,
        uri: str,
        order: str,
        progress: Progress,
        drop: bool = False,
        commands: CommandLogFile | None = None,
    ) -> None:
        from ..demo.server import DemoServer

        self.config = config
        #: the clients' failed commands (None: not counted)
        self.commands = commands
        self.order = order
        self.progress = progress
        self.db_name = "faults_" + uuid.uuid4().hex[:12]
        self.drop = drop
        settings = {
            "mongodb.uri": uri,
            "mongodb.db_name": self.db_name,
            "feed.watermark_seconds": repr(float(config.watermark)),
            "feed.order": order,
            "feed.sequencer": "thread",
            "demo.write_delay_ms": config.write_delay,
            "demo.auth_file": PACKAGED_AUTH_FILE,
            # the verdict of a cell is that cell's: a late commit shows
            # while the cell lasts and is gone before the next one
            "feed.lag_window_seconds": repr(float(LAG_WINDOW)),
            **config.extra,
        }
        self.server = DemoServer(settings, threads=16)
        self.log = Log()
        self.writers: list[FaultWriter] = []
        self.crawlers: list[Crawler] = []
        self.probe: ReadProbe | None = None
        self.names: dict[str, str] = {}

    def start(self) -> OrderRun:
        server = self.server.start()
        registry = server.registry
        if registry.feed_sequencer is not None:
            registry.feed_sequencer.wait_ready(timeout=30)
        self.names = app_names(registry)
        api = server.api_url
        access = Access(server.writer_key)
        config = self.config
        self.progress(f"[{self.order}] creating {config.tenders} tenders")
        ids = create_many(api, config.tenders, large=False, access=access)
        feed_url = f"{api}/tenders"
        self.crawlers = [
            Crawler(FeedClient(feed_url, limit=100), 0.05),
            Crawler(FeedClient(feed_url, limit=100, longpoll=config.longpoll), 0.05, name="longpoll-crawler"),
        ]
        health = server.url + registry.feed_settings.health_path
        self.probe = ReadProbe(api, health, "tenders", ids, self.log)
        self.writers = [
            FaultWriter(
                api,
                ids,
                self.log,
                access,
                rate=config.rate,
                create_every=config.create_every,
                seed=number,
                name=f"writer-{number}",
            )
            for number in range(config.writers)
        ]
        for thread in (*self.crawlers, self.probe, *self.writers):
            thread.start()
        self.progress(
            f"[{self.order}] {config.writers} writers, a crawler, a long-poll crawler and a read probe running"
        )
        return self

    def wait_recovered(self, fault_end: float) -> None:
        """Until a read and a write started after ``fault_end`` were
        answered, or the recovery time-out."""
        deadline = fault_end + self.config.recover_timeout
        while time.monotonic() < deadline:
            if measure.recovery(self.log.answers, fault_end) is not None:
                return
            time.sleep(0.05)

    def wait_struck(self, cell: Cell, mark: int, deadline: float) -> bool:
        """Keep the fault armed until it struck once (its client logged a
        command it failed since ``mark``) or ``deadline``; whether it did."""
        if self.commands is None:
            return False
        name = self.names[cell.role]
        while not strikes(cell, name, self.commands.since(mark)):
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.1)
        return True

    def wait_verdict(self, verdict: str, since: float, deadline: float) -> bool:
        """Until the probe has seen ``verdict`` since ``since`` (True), or
        ``deadline`` (False)."""
        while time.monotonic() < deadline:
            if any(moment >= since and seen == verdict for moment, seen in self.log.verdicts):
                return True
            time.sleep(0.05)
        return False

    def finals(self, ids: Sequence[str]) -> dict[str, str]:
        """The stored ``dateModified`` of each tender of ``ids``."""
        collection = self.server.registry.feed_store.collection("tenders")
        finals: dict[str, str] = {}
        for start in range(0, len(ids), 100):
            for doc in collection.find({"_id": {"$in": list(ids[start : start + 100])}}, {"dateModified": 1}):
                finals[doc["_id"]] = doc["dateModified"]
        return finals

    def caught_up(self, ids: Sequence[str]) -> dict[str, str]:
        """Wait until every crawler holds the final version of each tender
        of ``ids`` (at most ``W + settle`` seconds); the finals."""
        finals = self.finals(ids)
        wait = (self.config.watermark if self.order == "watermark" else 0.0) + self.config.settle
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if all(crawler.log.saw(tid, final) for crawler in self.crawlers for tid, final in finals.items()):
                break
            time.sleep(0.1)
        return finals

    def stored_titles(self, keys: Sequence[str]) -> list[str]:
        """The titles of the tenders created with one of ``keys``."""
        collection = self.server.registry.feed_store.collection("tenders")
        titles = [MARKER + key for key in keys]
        return [doc["title"] for doc in collection.find({"title": {"$in": titles}}, {"title": 1})]

    def run_cell(self, cell: Cell, fail: FailPoint) -> CellResult:
        """Arm ``cell``'s fault, clear it, measure (see the module)."""
        for writer in self.writers:
            writer.resume()
        began = time.monotonic()
        mark = self.commands.mark() if self.commands is not None else 0
        with fail.armed(cell.fail_point(self.names[cell.role])):
            time.sleep(self.config.hold)
            wanted = self.config.hold_until.get(cell.name)
            if wanted is not None:
                self.wait_verdict(wanted, began, began + self.config.recover_timeout)
            self.wait_struck(cell, mark, time.monotonic() + self.config.strike_timeout)
        fault_end = time.monotonic()
        self.wait_recovered(fault_end)
        for writer in self.writers:
            writer.pause()
        log = self.log
        quiet = time.monotonic()
        acks = [ack for ack in log.acks if began <= ack.at <= quiet]
        finals = self.caught_up(sorted({ack.tender_id for ack in acks}))
        ended = time.monotonic()
        answers = measure.in_window(log.answers, began, quiet)
        keys = [key for key, at in log.keys if began <= at < quiet]
        lost = measure.lost_writes(acks, finals, [crawler.log.saw for crawler in self.crawlers])
        struck = None
        if self.commands is not None:
            struck = strikes(cell, self.names[cell.role], self.commands.since(mark))
        return CellResult(
            cell=cell.name,
            kind=cell.kind,
            target=self.names[cell.role],
            command=cell.command,
            order=self.order,
            sustained=cell.sustained,
            delayed_commit=cell.delayed_commit,
            answers=measure.status_counts(answers),
            bare_errors=measure.bare_errors(answers),
            acknowledged=len(acks),
            lost=len(lost),
            lost_ids=lost,
            duplicates=measure.duplicates(keys, self.stored_titles(keys), MARKER),
            longest_unanswered_s=measure.longest_unanswered(log.answers, began, quiet),
            recovery_s=measure.recovery(log.answers, fault_end),
            verdict=measure.worst_verdict(log.verdicts, began, ended),
            seconds=round(ended - began, 1),
            struck=struck,
        ).judge()

    def close(self) -> None:
        """Stop the load and the app, drop the database."""
        pausable: list[Pausable] = [*self.writers, *([self.probe] if self.probe else [])]
        threads: list[Pausable | Crawler] = [*pausable, *self.crawlers]
        for thread in threads:
            thread.stop()
        notifier = feed_state(self.server.registry).longpoll
        if notifier is not None:
            notifier.stop()
        for thread in threads:
            if thread.is_alive():
                thread.join(timeout=35)
        for crawler in self.crawlers:
            crawler.client.close()
        sequencer = feed_state(self.server.registry).sequencer
        if sequencer is not None:
            sequencer.stop()
        try:
            if self.drop:
                # A transaction a fault left open may hold the database a
                # while: the drop is bounded (an embedded server's folder
                # goes away with it anyway).
                with pymongo.timeout(10), contextlib.suppress(PyMongoError):
                    self.server.registry.feed_store.client.drop_database(self.db_name)
        finally:
            self.server.close()


def run_matrix(config: MatrixConfig, progress: Progress = lambda line: None) -> list[CellResult]:
    """Every cell of ``config`` in each of its orders; one result each."""
    from ..embedded.server import EmbeddedServer

    embedded = None
    uri = config.uri
    if uri is None:
        progress("starting the embedded database with test commands")
        embedded = EmbeddedServer(extra_args=("--enable-test-commands",)).start()
        uri = embedded.uri
    fail = FailPoint(uri)
    results: list[CellResult] = []
    try:
        fail.clear()
        for order in config.orders:
            progress(f"[{order}] starting the demo app and the load")
            with command_log() as commands:
                results += _run_order(
                    config, uri, order, progress, fail, commands, drop=config.drop and embedded is None
                )
    finally:
        fail.close()
        if embedded is not None:
            embedded.stop()
    return results


def _run_order(
    config: MatrixConfig,
    uri: str,
    order: str,
    progress: Progress,
    fail: FailPoint,
    commands: CommandLogFile,
    drop: bool,
) -> list[CellResult]:
    """Every cell of ``config`` in ``order``, its clients logging their
    failed commands to ``commands``."""
    results: list[CellResult] = []
    run = OrderRun(config, uri, order, progress, drop=drop, commands=commands).start()
    try:
        for number, cell in enumerate(config.cells, 1):
            result = run.run_cell(cell, fail)
            results.append(result)
            progress(f"[{order}] {number}/{len(config.cells)} {progress_line(result)}")
    finally:
        run.close()
    return results


def progress_line(result: CellResult) -> str:
    """One line about a finished cell."""
    answers = " ".join(f"{status}x{count}" for status, count in result.answers.items())
    recovered = "-" if result.recovery_s is None else f"{result.recovery_s:g} s"
    text = (
        f"{result.cell}: struck {'-' if result.struck is None else result.struck}; {answers}; "
        f"lost {result.lost}, duplicates {result.duplicates}, "
        f"recovered in {recovered}, verdict {result.verdict}: {result.outcome}"
    )
    if result.problems:
        text += " (" + "; ".join(result.problems) + ")"
    return text
