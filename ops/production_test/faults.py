"""The faults of the production-shaped test: a web worker and a sequencer
killed, the feed moving with one sequencer, and the outage with no
sequencer until the alert fires, then resolves after their restart."""

from __future__ import annotations

import os
import signal
import time

from .deployment import ALERT, FEEDS, THRESHOLD_SECONDS, Failure
from .processes import worker_pids
from .run import Run


def kill_worker(run: Run) -> None:
    assert run.gunicorn is not None
    master = run.gunicorn.pid
    before = worker_pids(master)
    victim = min(before)
    os.kill(victim, signal.SIGKILL)
    run.timeline.worker_killed = run.clock.now()
    run.say(f"kill -9 web worker {victim}")
    after = run.clock.wait_for(
        "gunicorn replacing the killed worker",
        lambda: (pids := worker_pids(master)) and victim not in pids and len(pids) == len(before) and pids,
        60,
    )
    run.timeline.worker_replaced = run.clock.now()
    run.say(f"gunicorn replaced it: workers {sorted(after)}")


def kill_sequencer(run: Run) -> None:
    child = run.sequencers.pop("sequencer-a")
    os.kill(child.pid, signal.SIGKILL)
    child.process.wait(10)
    run.timeline.sequencer_killed = run.clock.now()
    run.say(f"kill -9 sequencer a ({child.pid}); sequencer b goes on alone")


def check_feed_moves(run: Run, since: float) -> None:
    """The crawlers received versions acknowledged after ``since``
    (``time.time()``): the feeds move with one sequencer."""
    acks = [ack for writer in run.writers for key, ack in writer.acks.items() if ack > since]
    seen = {key for tail in run.tails.values() for key in tail.snapshot()}
    fresh = [key for writer in run.writers for key, ack in writer.acks.items() if ack > since and key in seen]
    if acks and not fresh:
        raise Failure(f"with one sequencer the feeds did not move: none of {len(acks)} new versions was crawled")
    run.say(f"with one sequencer the feeds move: {len(fresh)} of {len(acks)} versions since the kill crawled")


def outage(run: Run) -> None:
    assert run.alerts is not None
    child = run.sequencers.pop("sequencer-b")
    child.stop()
    run.timeline.outage_began = run.clock.now()
    run.say(
        f"stopped sequencer b (SIGTERM, exit status {child.process.returncode}): no sequencer runs; "
        f"waiting for {ALERT} to fire (threshold {THRESHOLD_SECONDS} s, then the rule's for: 30s)"
    )
    began = run.timeline.outage_began
    deadline = time.monotonic() + run.options.alert_timeout
    next_line = time.monotonic() + 5
    while run.alerts.first(FEEDS[0], "firing", began) is None:
        run.require_running()
        if time.monotonic() > deadline:
            raise Failure(
                f"{ALERT} did not fire for feed {FEEDS[0]} within {run.options.alert_timeout:g} s "
                f"of the last sequencer's stop (alert state: {run.alerts.state(FEEDS[0])}; "
                f"verdicts {run.verdicts()}; Prometheus API errors: {run.alerts.errors})"
            )
        run.clock.check("waiting for the alert to fire")
        if time.monotonic() >= next_line:
            run.say(f"outage: {run.status()}")
            next_line = time.monotonic() + 5
        time.sleep(0.25)
    run.say(f"{ALERT} fires: {run.status()}")
    run.hold(run.options.hold_firing, "the alert fires")
    for name in ("sequencer-a", "sequencer-b"):
        run.start_sequencer(name)
    run.timeline.outage_ended = run.clock.now()
    run.say("started sequencers a and b again")
    alerts = run.alerts

    def resolved() -> bool:
        # inactive alone is not enough: a failed scrape leaves the rule's
        # expression empty, which resolves the alert too; the verdict
        # must be ok in a fresh sample
        if not (run.require_running() and all(alerts.state(feed) == "inactive" for feed in FEEDS)):
            return False
        ok = run.query_by('max by (feed) (openprocurement_feed_verdict{verdict="ok"})', ("feed",))
        return all(ok.get(feed) == 1.0 for feed in FEEDS)

    run.clock.wait_for(
        f"{ALERT} resolving, the verdict ok again, after the sequencers' restart",
        resolved,
        run.options.alert_timeout,
        0.25,
    )
    run.timeline.caught_up = run.clock.now()
    run.say(f"{ALERT} resolved: {run.status()}")
