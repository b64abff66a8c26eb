"""The race experiment: the same write load with and without the watermark.

One run (:func:`run_once`) on a fresh database:

1. start the demo API on a real HTTP server (waitress) over the embedded
   database, with ``demo.write_delay_ms`` so that writes commit a few
   milliseconds after their ``$$NOW`` stamp, as they do under load in
   production;
2. create the small (1 item) and large (10 items, long texts) tenders;
3. for ``duration`` seconds, writer threads patch them over HTTP while the
   :class:`~.detector.Detector` checks the feed and two
   :class:`~.crawler.Crawler` follow it forward: one polling every
   ``poll_interval``, one long-polling (``feed=longpoll``, SPEC E);
4. stop the writers, let the crawlers go on for ``W`` plus a margin so that
   they can catch up, read on to the end of the feed, then compare what each
   received with the database: a tender whose final version a crawler never
   saw is *lost*.

:func:`run_experiment` repeats the run for each watermark value and, by
default, once more in commit order (SPEC D: a sequencer in the API process,
no watermark), all on the same load.

The *hot* scenario (``hot=True``) patches a few tenders (30 by default) as
fast as the writers can (160 patches/s aimed at) and reports, per run, the
longest time any acknowledged change stayed invisible to the crawler (until
it was given that version or a newer one): a watermark feed shows a document
only once its writes pause for ``W``, a commit-ordered feed shows every
change.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable
from typing import Any

from ..demo.load import Access
from ..store.state import feed_state

# RaceConfig, RunResult, delay_samples and delay_summary (``as``: exported) are
# imported from here too.
from .config import RaceConfig as RaceConfig
from .crawler import Crawler
from .detector import Detector, DetectorStats, DetectorThread
from .feed import FeedClient
from .load import LoggingWriter, create_many
from .results import RunResult as RunResult
from .results import delay_samples as delay_samples
from .results import delay_summary as delay_summary
from .results import longest_invisible, lost
from .trace import build_trace
from .worker import SequencerWorker

Progress = Callable[[str], None]


def _split_ids(small: list[str], large: list[str], writers: int) -> list[list[str]]:
    """The tender ids each writer patches: half the writers the small
    tenders, half the large ones (all of them for a single writer)."""
    if writers == 1 or not small or not large:
        return [small + large] * writers
    return [small if number % 2 == 0 else large for number in range(writers)]


def _settings(config: RaceConfig, order: str, watermark: float) -> dict[str, str]:
    settings = {
        "mongodb.uri": config.mongodb_uri or "embedded://",
        "mongodb.db_name": "race_" + uuid.uuid4().hex[:12],
        "feed.watermark_seconds": repr(float(watermark)),
        "feed.order": order,
        "feed.sequencer": "thread" if order == "commit" and config.sequencer == "thread" else "off",
        "demo.write_delay_ms": config.write_delay,
    }
    if config.auth_file:
        settings["demo.auth_file"] = config.auth_file
    settings.update(config.settings)
    return settings


def database_clock(config: RaceConfig, registry: Any) -> Callable[[], float | None]:
    """What reads the database process's CPU seconds in a run: the
    embedded server the run started, else ``config.database_pid``."""
    from ..embedded.server import process_tree_cpu_seconds

    embedded = feed_state(registry).embedded
    if embedded is not None:
        return embedded.cpu_seconds  # type: ignore[no-any-return]
    pid = config.database_pid
    if pid is not None:
        return lambda: process_tree_cpu_seconds(pid)
    return lambda: None


def run_label(order: str, watermark: float) -> str:
    """How a run is named in progress lines."""
    return "[commit]" if order == "commit" else f"[W={watermark:g}]"


def run_once(
    config: RaceConfig,
    watermark: float,
    progress: Progress = lambda line: None,
    order: str = "watermark",
) -> RunResult:
    """One run of the experiment in ``order`` (with watermark ``watermark``
    in watermark order) on a fresh database."""
    from ..demo.server import DemoServer

    label = run_label(order, watermark)
    settings = _settings(config, order, watermark)
    progress(f"{label} starting the database and the demo API")
    server = DemoServer(settings, threads=config.threads)
    writers: list[LoggingWriter] = []
    detector = crawler = waiter = None
    worker: SequencerWorker | None = None
    try:
        server.start()
        if server.registry.feed_sequencer is not None:
            server.registry.feed_sequencer.wait_ready(timeout=30)
        elif order == "commit":
            embedded = server.registry.feed_embedded
            uri = embedded.uri if embedded is not None else str(config.mongodb_uri)
            worker = SequencerWorker(uri, settings["mongodb.db_name"], auth_file=config.auth_file).start()
            progress(f"{label} starting the sequencer worker process")
            if not worker.wait_ready(server.registry.feed_store.db):
                raise RuntimeError(f"the sequencer worker did not start: {worker.stop()}")
        api = server.api_url
        feed_url = f"{api}/tenders"
        progress(f"{label} creating {config.small} small and {config.large} large tenders")
        access = Access(server.writer_key)
        small = create_many(api, config.small, large=False, seed=config.seed, access=access)
        large = create_many(
            api, config.large, large=True, seed=None if config.seed is None else config.seed + 1, access=access
        )
        crawler = Crawler(FeedClient(feed_url, limit=config.page_limit), config.poll_interval)
        if config.longpoll > 0:
            waiter = Crawler(
                FeedClient(feed_url, limit=config.page_limit, longpoll=config.longpoll),
                config.poll_interval,
                name="longpoll-crawler",
            )
        crawlers = [crawler] if waiter is None else [crawler, waiter]
        if config.detector:
            detector = DetectorThread(Detector(FeedClient(feed_url, limit=config.page_limit), config.check_wait))
        per_writer = config.rate / config.writers if config.rate > 0 else 0.0
        writers = [
            LoggingWriter(
                api,
                ids,
                rate=per_writer,
                seed=None if config.seed is None else config.seed + 10 + number,
                name=f"writer-{number}",
                access=access,
            )
            for number, ids in enumerate(_split_ids(small, large, config.writers))
        ]
        for each in crawlers:
            each.start()
        if detector is not None:
            detector.start()
        conflicts_before = server.registry.demo_stats.conflicts
        cpu_clock = database_clock(config, server.registry)
        cpu_before = cpu_clock()
        started = time.monotonic()
        for writer in writers:
            writer.start()
        progress(f"{label} {config.writers} writers patching for {config.duration:g} s")
        deadline = started + config.duration
        next_report = started + config.progress_every
        while (now := time.monotonic()) < deadline:
            time.sleep(max(0.0, min(deadline, next_report) - now))
            if time.monotonic() >= next_report and time.monotonic() < deadline:
                next_report += config.progress_every
                elapsed = time.monotonic() - started
                patches = sum(writer.stats.patches for writer in writers)
                checks = (
                    f", {detector.stats.checks} checks, {detector.stats.failures} failures"
                    if detector is not None
                    else ""
                )
                progress(f"{label} {elapsed:5.1f} s: {patches} patches ({patches / elapsed:.1f}/s){checks}")
        for writer in writers:
            writer.stop()
        for writer in writers:
            writer.join(timeout=60)
        duration = time.monotonic() - started
        cpu_after = cpu_clock()
        conflicts = server.registry.demo_stats.conflicts - conflicts_before
        stats = DetectorStats()
        if detector is not None:
            detector.stop()
            detector.join(timeout=60)
            stats = detector.stats
        collection = server.registry.feed_store.collection("tenders")
        finals = {doc["_id"]: doc["dateModified"] for doc in collection.find({"is_public": True}, {"dateModified": 1})}
        catch_up = (watermark if order == "watermark" else 0.0) + config.settle
        progress(f"{label} writers stopped; the crawlers catch up for up to {catch_up:g} s")
        until = time.monotonic() + catch_up
        while time.monotonic() < until:
            if all(each.log.saw(tender_id, final) for each in crawlers for tender_id, final in finals.items()):
                break
            time.sleep(0.1)
        server.registry.feed_longpoll.stop()  # answer the long-poll crawler's waiting request now
        for each in crawlers:
            each.stop()
        for each in crawlers:
            each.join(timeout=60)
            each.drain()  # whatever a crawler has not reached yet is not lost
            each.client.close()
        lost_ids = lost(finals, crawler)
        waiter_lost = None if waiter is None else lost(finals, waiter)
        patches = sum(writer.stats.patches for writer in writers)
        result = RunResult(
            watermark=watermark,
            duration=round(duration, 1),
            tenders=len(finals),
            writers=config.writers,
            write_delay_ms=config.write_delay,
            patches=patches,
            write_errors=sum(writer.stats.errors for writer in writers),
            patches_per_second=round(patches / duration, 1) if duration else 0.0,
            checks=stats.checks,
            failures=stats.failures,
            failure_percent=round(100.0 * stats.failures / stats.checks, 2) if stats.checks else 0.0,
            lags_ms=list(stats.lags_ms),
            check_errors=stats.errors,
            crawler_items=crawler.log.deliveries,
            lost=len(lost_ids),
            lost_ids=lost_ids,
            duplicates=crawler.log.duplicates,
            crawler_errors=crawler.log.errors,
            feed_delay_ms=delay_summary(polling_delays := delay_samples(writers, crawler)),
            order=order,
            write_conflicts=conflicts,
            hot=config.hot,
            longest_invisible_s=(longest_invisible(writers, crawler, time.time()) if config.hot else None),
            sequencer=_sequencer_figures(server.registry, worker),
            database_cpu_s=(
                round(cpu_after - cpu_before, 3) if cpu_before is not None and cpu_after is not None else None
            ),
            trace=build_trace(
                order,
                watermark,
                (ack for writer in writers for ack in writer.acks),
                crawler.log,
                stats.anomalies,
            ),
            delays={"polling": polling_delays},
        )
        if waiter is not None and waiter_lost is not None:
            result.longpoll_items = waiter.log.deliveries
            result.longpoll_lost = len(waiter_lost)
            result.longpoll_lost_ids = waiter_lost
            result.longpoll_duplicates = waiter.log.duplicates
            result.longpoll_errors = waiter.log.errors
            result.delays["longpoll"] = delay_samples(writers, waiter)
            result.longpoll_delay_ms = delay_summary(result.delays["longpoll"])
        progress(
            f"{label} done: {result.patches_per_second} patches/s, {result.checks} checks, "
            f"{result.failures} failures, {result.lost} lost"
            + ("" if result.longpoll_lost is None else f" ({result.longpoll_lost} by the long-poll crawler)")
            + (f", database CPU {result.database_cpu_ms_per_patch} ms/patch" if result.database_cpu_s else "")
        )
        return result
    finally:
        for thread in (*writers, detector, crawler, waiter):
            if thread is not None:
                thread.stop()
        sequencer = feed_state(server.registry).sequencer
        if sequencer is not None:
            sequencer.stop()  # before its collection is dropped
        if worker is not None:
            worker.stop()
        if config.mongodb_uri:
            with contextlib.suppress(Exception):  # the database may be gone; nothing to clean then
                server.registry.feed_store.client.drop_database(settings["mongodb.db_name"])
        server.close()


def _sequencer_figures(registry: Any, worker: SequencerWorker | None) -> dict[str, Any] | None:
    """The sequencer's counts and commit-to-checkpoint delays."""
    if worker is not None:
        worker.stop()
        return dict(worker.figures(), where="process")
    sequencer = feed_state(registry).sequencer
    if sequencer is None:
        return None
    stats = sequencer.followers[0].stats
    return {
        "events": stats.events,
        "stamped": stats.stamped,
        "batches": stats.batches,
        "commit_to_checkpoint_ms": stats.delay_summary(),
        "where": "thread",
    }


def run_experiment(config: RaceConfig, progress: Progress = lambda line: None) -> list[RunResult]:
    """:func:`run_once` for each of ``config.runs``, in order."""
    return [run_once(config, watermark, progress, order) for order, watermark in config.runs]
