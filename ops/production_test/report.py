"""The production-shaped test's timeline drawn (``--plot``)."""

from __future__ import annotations

import time

from .deployment import FEEDS, THRESHOLD_SECONDS
from .run import Run


def draw_timeline(run: Run, path: str) -> None:
    """The run's timeline (``--plot``): writes/s, each version's delay to the
    crawler, the checkpoint's age, the faults and the alert."""
    from openprocurement_feed.plots.production import OpsRun, plot_ops_timeline

    offset = time.time() - run.clock.now()  # wall clock - test clock
    acks = {version: moment - offset for writer in run.writers for version, moment in writer.acks.items()}
    seen = {version: moment - offset for version, moment in run.tails[FEEDS[0]].snapshot().items()}
    timeline = run.timeline
    events = [
        (moment, what)
        for moment, what in (
            (timeline.worker_killed, "kill -9 web worker"),
            (timeline.sequencer_killed, "kill -9 sequencer a"),
            (timeline.outage_began, "sequencer b stopped"),
            (timeline.outage_ended, "sequencers started"),
        )
        if moment is not None
    ]
    alerts = [(event.at, event.state) for event in run.alerts.events if event.feed == FEEDS[0]] if run.alerts else []
    checkpoints = run.sampler.samples if run.sampler is not None else []
    plot_ops_timeline(OpsRun(acks, seen, checkpoints, events, alerts, THRESHOLD_SECONDS), path)
    print(f"test-ops: the timeline is in {path}", flush=True)
