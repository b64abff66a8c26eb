"""The race experiment's parameters: the load (writers, rate, tenders, how
long each write stays open), the runs (the watermarks, commit order, the hot
scenario) and the instruments (detector, crawlers, long-poll)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..demo.auth import PACKAGED_AUTH_FILE


@dataclass(frozen=True)
class RaceConfig:
    """The load and the instruments of the experiment.

    :param rate: total patches per second aimed at by all writers together;
        0 means as fast as the API answers.
    :param write_delay: ``demo.write_delay_ms``: ``"5-40"`` keeps each write
        open 5 to 40 ms after its stamp.
    :param settle: seconds the crawler keeps polling after the writers stop,
        on top of the watermark.
    :param mongodb_uri: a MongoDB to use instead of a fresh embedded
        database (each run then uses a database of its own, dropped after).
    :param auth_file: the demo's ``demo.auth_file`` (default: the packaged
        demo brokers): the writers create and patch with a broker's key and
        each tender's token, as upstream's clients do; None for open writes.
    """

    duration: float = 20.0
    writers: int = 8
    rate: float = 72.0
    small: int = 70
    large: int = 70
    write_delay: str = "5-40"
    watermarks: tuple[float, ...] = (0.0, 1.0)
    commit: bool = True
    hot: bool = False
    #: where the commit run's sequencer runs: its own ``process`` (as in
    #: production) or a ``thread`` of the API process
    sequencer: str = "process"
    check_wait: float = 0.2
    page_limit: int = 100
    poll_interval: float = 0.05
    #: seconds the long-poll crawler asks the server to hold a request at
    #: the head (``feed=longpoll&timeout=...``); 0 runs no long-poll crawler
    longpoll: float = 10.0
    settle: float = 2.0
    threads: int = 16
    progress_every: float = 5.0
    mongodb_uri: str | None = None
    seed: int | None = None
    #: run the detector beside the crawler (the cost benchmark leaves it
    #: out: one crawler, as a deployment's own load would have it)
    detector: bool = True
    #: the process id of the database at ``mongodb_uri`` when it runs on
    #: this machine, to count its CPU per patch (the embedded server of a
    #: run without ``mongodb_uri`` is counted anyway)
    database_pid: int | None = None
    auth_file: str | None = PACKAGED_AUTH_FILE
    #: further settings of the API's app (they win over the run's own), as
    #: ``(key, value)`` pairs: ``(("feed.sequencer", "observe"),)``
    settings: tuple[tuple[str, str], ...] = ()

    @property
    def runs(self) -> list[tuple[str, float]]:
        """``(order, watermark)`` of each run, in order."""
        runs = [("watermark", watermark) for watermark in self.watermarks]
        if self.commit:
            runs.append(("commit", 0.0))
        return runs

    @classmethod
    def hot_scenario(cls, **overrides: Any) -> RaceConfig:
        """The hot-documents load: 30 small tenders, 160 patches/s aimed at,
        writes committed at once (held open, eight writers on 30 tenders
        would mostly measure their own write conflicts)."""
        values: dict[str, Any] = dict(small=30, large=0, rate=160.0, writers=8, hot=True, write_delay="0")
        values.update(overrides)
        return cls(**values)
