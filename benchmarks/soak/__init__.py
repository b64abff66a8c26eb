"""The steady state: ``make soak`` (``python -m benchmarks soak``).

Runs the production shape for ``--minutes`` (``SOAK_MINUTES``, 60 by
default) under the seed's load and prints, every minute, each process's RSS
and open descriptors, the database's connections, each collection's
documents and bytes, the change rate, the commit-to-visible delay p50/p99
(a write's acknowledgement to the long-polling crawler's file; the polling
crawler's p99 beside it; the sequencer's published start-to-commit p99),
the web workers' request p99 (long polls apart) and their 5xx answers.

The shape (:mod:`.shape`): the embedded database with a bounded oplog and
cache, the demo of ``examples/production.ini`` under gunicorn with
``examples/gunicorn.conf.py`` (3 workers, no restart after a number of
requests unless ``--max-requests``: a leak must show), one sequencer process,
two reference crawlers (``openprocurement-feed sync --follow``, one long-polling,
one polling every second). The load (:mod:`.load`): 70 small and 70 large
tenders patched at ``--rate`` (the seed's 72/s) by 8 writers on one schedule,
and new tenders created with an ``Idempotency-Key`` at ``--create-rate``.

At the end (or at Ctrl-C) the writers stop, both crawlers must hold the
final version of every tender the database holds (0 lost), every process
stops, and the slope per hour of each series after ``--warm-up`` minutes
(least squares) gets a verdict per criterion (:mod:`.figures`); ``--plot``
draws the figure of the docs (docs/operations.rst, "The steady state").
Exit status: 0 every verdict ok, 1 one failed, 2 a process failed to start.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from openprocurement_feed.demo.idempotency import KEYS
from openprocurement_feed.store.buckets import LEVELS, reconcile_name
from openprocurement_feed.store.orders import positions_name

from ..common import percentile
from .figures import Sample, Verdict, judge
from .load import Acks, start_writers, stop_writers
from .probes import OPLOG, AccessLog, CrawlerOutput, HealthWatch, published_lag, read_database, read_process
from .report import print_minute, print_verdicts
from .shape import DB_NAME, FEED, LONGPOLL_SECONDS, PREFIX, Shape

#: A version acknowledged this long ago is counted in the minute's delay
#: figures (seen by then, or skipped: overwritten before a crawler read it).
DELAY_GRACE_SECONDS = 30.0
#: The crawlers' last chance to catch up after the writers stop (s).
CATCH_UP_SECONDS = 90.0
#: The seed's objects: small (1 item) and large (10 items) tenders.
SMALL, LARGE = 70, 70
WRITERS = 8


@contextlib.contextmanager
def interrupts_as_keyboard() -> Iterator[None]:
    """SIGINT (also where a background job ignores it) and SIGTERM raise
    KeyboardInterrupt: the soak stops its load and still reports."""

    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = {signum: signal.signal(signum, handler) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


def say(text: str) -> None:
    print(f"soak: {text}", flush=True)


class Soak:
    """One run: the shape, the load and the samples."""

    def __init__(self, options: Any, workdir: Path) -> None:
        self.options = options
        self.workdir = workdir
        self.shape = Shape(workdir, options)
        self.acks = Acks()
        self.writers: list[Any] = []
        self.samples: list[Sample] = []
        self.crawlers: dict[str, CrawlerOutput] = {}
        self.access = AccessLog(workdir / "access.log")
        self.client: Any = None
        self.health: HealthWatch | None = None
        self.started = 0.0
        self.cursor = 0
        self.last = (0.0, 0)
        self.interrupted = False

    # -- start ------------------------------------------------------------

    def start(self) -> None:
        from pymongo import MongoClient

        from openprocurement_feed.race.load import create_many

        options = self.options
        say(
            f"embedded database: --oplog-max-entries {options.oplog_max_entries} "
            f"--oplog-retention-seconds {options.oplog_retention_seconds} --cache-size {options.cache_size}"
        )
        self.shape.start_database()
        self.client = MongoClient(self.shape.database.uri, serverSelectionTimeoutMS=10000, appname="soak-probe")
        self.shape.start_sequencer()
        self.shape.start_web()
        self.access.start()
        self.shape.wait_for_web()
        self.health = HealthWatch(f"{self.shape.base}{PREFIX}/feeds/health")
        say(f"gunicorn serves {self.shape.base} with {options.workers} workers; one sequencer process")
        small = create_many(self.shape.api, SMALL, large=False, seed=10)
        large = create_many(self.shape.api, LARGE, large=True, seed=11)
        for name, longpoll in (("crawler-longpoll", LONGPOLL_SECONDS), ("crawler-poll", 0)):
            output = CrawlerOutput(self.shape.start_crawler(name, longpoll))
            output.start()
            self.crawlers[name] = output
        finals = self.finals()
        self.wait("the crawlers receiving the seed", lambda: all(c.has_all(finals) for c in self.crawlers.values()), 90)
        self.writers = start_writers(
            self.shape.api, small + large, options.rate, WRITERS, options.create_rate, self.acks
        )
        self.started = time.monotonic()
        self.last = (self.started, 0)
        self.health.start()
        say(
            f"{WRITERS} writers patch {SMALL} small and {LARGE} large tenders at {options.rate:g}/s; creates with "
            f"Idempotency-Key at {options.create_rate:g}/s; a long-polling and a polling crawler; "
            f"{options.minutes:g} minutes, warm-up {options.warm_up:g}, a line every {options.interval:g} s"
        )

    def wait(self, what: str, condition: Any, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not condition():
            self.shape.require_running()
            if time.monotonic() > deadline:
                say(f"{what}: not within {timeout:g} s")
                return False
            time.sleep(0.25)
        return True

    def finals(self) -> dict[str, str]:
        """Every public tender's final ``dateModified`` in the database."""
        return {
            doc["_id"]: doc["dateModified"]
            for doc in self.client[DB_NAME][FEED].find({"is_public": True}, {"dateModified": 1})
        }

    # -- every minute -----------------------------------------------------

    def sample(self) -> Sample:
        now = time.monotonic()
        minute = (now - self.started) / 60.0
        changes = self.acks.count()
        rate = (changes - self.last[1]) / max(1e-9, now - self.last[0])
        self.last = (now, changes)
        acked, self.cursor = self.acks.since(self.cursor, time.time() - DELAY_GRACE_SECONDS)
        delays: dict[str, list[float]] = {name: [] for name in self.crawlers}
        for at, version in acked:
            for name, crawler in self.crawlers.items():
                seen = crawler.when(version)
                if seen is not None:
                    delays[name].append(max(0.0, seen - at) * 1000)
        longpoll, poll = delays["crawler-longpoll"], delays["crawler-poll"]
        tally = self.access.take()
        processes = {}
        for role, pid in self.shape.roles().items():
            figures = read_process(pid)
            if figures is not None:
                processes[role] = (figures.rss_mb, figures.fds)
        me = read_process(os.getpid())
        if me is not None:
            processes["soak"] = (me.rss_mb, me.fds)
        database = read_database(self.client, DB_NAME)
        return Sample(
            minute=round(minute, 2),
            changes=changes,
            creates=self.acks.creates,
            rate=round(rate, 2),
            processes=processes,
            connections=database.connections,
            collections=database.collections,
            lag_p50_ms=percentile(longpoll, 0.5) if longpoll else None,
            lag_p99_ms=percentile(longpoll, 0.99) if longpoll else None,
            poll_p99_ms=percentile(poll, 0.99) if poll else None,
            sequencer_p99_ms=published_lag(self.client, DB_NAME, FEED).get("p99"),
            request_p99_ms=percentile(tally.durations, 0.99) * 1000 if tally.durations else None,
            requests=tally.requests,
            errors=tally.errors,
            verdict=self.verdict(),
            load=round(os.getloadavg()[0], 1) if hasattr(os, "getloadavg") else None,
        )

    def verdict(self) -> str:
        """The health view's readings of the interval, ``feed=verdict
        count``, the ones not ``ok`` first."""
        readings = self.health.take() if self.health is not None else {}
        ordered = sorted(readings.items(), key=lambda item: (item[0].endswith("=ok"), item[0]))
        return ", ".join(f"{name} x{count}" for name, count in ordered) or "no reading"

    def hold(self) -> None:
        """A sample every ``--interval`` seconds until ``--minutes`` have passed."""
        total = self.options.minutes * 60.0
        while (elapsed := time.monotonic() - self.started) < total:
            next_at = (len(self.samples) + 1) * self.options.interval
            time.sleep(max(0.0, min(next_at, total) - elapsed))
            self.shape.require_running()
            self.record(self.sample())

    def record(self, sample: Sample) -> None:
        """Keep, log and print one sample."""
        self.samples.append(sample)
        with open(self.workdir / "samples.jsonl", "a", encoding="utf-8") as log:
            log.write(json.dumps(sample.as_json()) + "\n")
        print_minute(sample)

    # -- the end ----------------------------------------------------------

    def finish(self) -> list[tuple[str, str, bool]]:
        """Stop the load, let the crawlers catch up; the loss and 5xx rows."""
        stop_writers(self.writers)
        errors = sum(writer.stats.errors for writer in self.writers if hasattr(writer, "stats"))
        say(
            f"writers stopped: {self.acks.count():,} acknowledged changes ({self.acks.creates:,} creates), "
            f"{errors} failed patches, refused by status: {dict(self.acks.refused) or 'none'}"
        )
        finals = self.finals()
        caught = self.wait(
            "the crawlers catching up",
            lambda: all(crawler.has_all(finals) for crawler in self.crawlers.values()),
            CATCH_UP_SECONDS,
        )
        rows = []
        for name, crawler in self.crawlers.items():
            lost = crawler.missing(finals)
            rows.append(
                (
                    f"0 lost ({name})",
                    f"{len(lost)} of {len(finals):,} final versions missing"
                    + (f": {', '.join(lost[:3])}" if lost else ""),
                    not lost,
                )
            )
        if not caught:
            say("the crawlers did not catch up in time; the loss check counts what they had")
        time.sleep(1.0)  # the access log's last lines
        errors_total = dict(self.access.errors_total)
        others = {status: count for status, count in errors_total.items() if status != 503}
        readings = dict(self.health.total) if self.health is not None else {}
        bad = {name: count for name, count in readings.items() if not name.endswith("=ok")}
        rows.append(
            (
                "health verdict ok throughout",
                f"{sum(readings.values())} readings every 5 s; not ok: {bad or 'none'}",
                not bad,
            )
        )
        rows.append(
            (
                "no 5xx but 503",
                f"5xx over the run: {errors_total or 'none'}",
                not others,
            )
        )
        return rows

    def close(self) -> None:
        for follower in [*self.crawlers.values(), self.access]:
            follower.stopping.set()
        if self.health is not None:
            self.health.stopping.set()
        self.shape.stop()
        if self.client is not None:
            self.client.close()


def run(options: Any) -> int:
    """The soak; its exit status."""
    if options.plot:
        from openprocurement_feed.plots import image_format

        try:
            image_format(options.plot)
        except ValueError as error:
            say(f"--plot: {error}")
            return 2
    if options.from_samples is not None:
        return replay(options)
    workdir = Path(options.workdir or tempfile.mkdtemp(prefix="feed-soak-"))
    workdir.mkdir(parents=True, exist_ok=True)
    say(f"files and logs in {workdir}")
    soak = Soak(options, workdir)
    rows: list[tuple[str, str, bool]] = []
    with interrupts_as_keyboard():
        try:
            try:
                soak.start()
            except (RuntimeError, OSError) as error:
                say(f"the shape did not start: {error}")
                return 2
            try:
                soak.hold()
            except KeyboardInterrupt:
                soak.interrupted = True
                say("interrupted: a last sample, then the load stops and the summary follows")
                with contextlib.suppress(RuntimeError):
                    soak.record(soak.sample())
            except RuntimeError as error:
                soak.interrupted = True
                say(f"a process failed: {error}")
            try:
                rows = soak.finish()
            except KeyboardInterrupt:
                say("interrupted again: no loss check")
        finally:
            say("stopping every process")
            soak.close()
    return summarize(soak, rows, workdir)


def replay(options: Any) -> int:
    """``--from-samples FILE``: the verdicts and the figure of an earlier
    run's samples (its loss and 5xx checks are in its own output)."""
    with open(options.from_samples, encoding="utf-8") as lines:
        samples = [Sample.from_json(json.loads(line)) for line in lines if line.strip()]
    if not samples:
        say(f"no sample in {options.from_samples}")
        return 1
    verdicts = judge_samples(samples, options)
    passed = print_verdicts(verdicts, [])
    if options.plot:
        from .plot import plot_soak

        say(f"the figure is in {plot_soak(samples, options.warm_up, options.plot, figure_note(samples))}")
    return 0 if passed else 1


def figure_note(samples: list[Sample], interrupted: bool = False) -> str:
    """The figure title's tail: the rate reached and the machine's load."""
    minutes = samples[-1].minute
    rate = samples[-1].changes / (minutes * 60) if minutes else 0.0
    loads = sorted(sample.load for sample in samples if sample.load is not None)
    load = f", machine load {loads[len(loads) // 2]:.0f} (median; 2 cores)" if loads else ""
    return f" at {rate:.0f} changes/s{load}" + (" (interrupted)" if interrupted else "")


def database_from(samples: list[Sample], options: Any) -> float | None:
    """The first minute at which the oplog had reached its bound (90 %
    of its entries, or its retention passed), None if it never did."""
    bound = 0.9 * options.oplog_max_entries
    for sample in samples:
        entries = sample.collections.get(OPLOG, (0, 0))[0]
        if entries >= bound or sample.minute * 60 >= options.oplog_retention_seconds:
            return float(max(sample.minute, options.warm_up))
    return None


def judge_samples(samples: list[Sample], options: Any) -> list[Verdict]:
    """Every verdict on ``samples`` (the soak's own process is not judged)."""
    judged = [role for role in samples[-1].processes if role != "soak"]
    objects = object_collections({name for sample in samples for name in sample.collections})
    return judge(samples, options.warm_up, database_from(samples, options), objects, judged, options.oplog_max_entries)


def object_collections(names: set[str]) -> dict[str, int]:
    """The collections that grow with the objects, and how many documents
    each may hold per object: every feed collection (one with a positions
    collection beside it) and its positions (one), the idempotency keys
    (one, until their TTL), and the reconcile collection beside a feed
    collection (a record per object, and at most one bucket per level of
    it: a patch moves a record and deletes the buckets it emptied)."""
    found = {f"{DB_NAME}.{KEYS}": 1}
    for name in names:
        base = name.removeprefix(f"{DB_NAME}.")
        if f"{DB_NAME}.{positions_name(base)}" in names:
            found.update({name: 1, f"{DB_NAME}.{positions_name(base)}": 1})
            found[f"{DB_NAME}.{reconcile_name(base)}"] = 1 + LEVELS
    return found


def summarize(soak: Soak, rows: list[tuple[str, str, bool]], workdir: Path) -> int:
    options = soak.options
    samples = soak.samples
    if not samples:
        say("no sample was taken")
        print_verdicts([], rows)
        return 1
    minutes = samples[-1].minute
    changes = samples[-1].changes
    rate = changes / (minutes * 60) if minutes else 0.0
    say(
        f"{minutes:.1f} minutes, {changes:,} changes ({rate:.1f}/s of the {options.rate:g}/s asked), "
        f"{samples[-1].creates:,} creates; a machine shared with other work: read the rates and delays with that"
    )
    verdicts = judge_samples(samples, options)
    passed = print_verdicts(verdicts, rows)
    if options.plot:
        from .plot import plot_soak

        note = figure_note(samples, soak.interrupted)
        say(f"the figure is in {plot_soak(samples, options.warm_up, options.plot, note)}")
    say(f"samples (JSON lines) in {workdir / 'samples.jsonl'}")
    say("PASSED: the steady state holds" if passed and rows else "FAILED or incomplete: see the table")
    if passed and rows and not options.keep and options.workdir is None:
        shutil.copy(workdir / "samples.jsonl", Path(tempfile.gettempdir()) / "feed-soak-samples.jsonl")
        shutil.rmtree(workdir, ignore_errors=True)
        say(f"(the folder was removed; the samples are kept in {tempfile.gettempdir()}/feed-soak-samples.jsonl)")
    return 0 if passed and rows else 1
