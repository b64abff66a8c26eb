"""What the health view and the metrics share: the verdict names and the
figures of a feed that a scrape reads (below both: neither imports the other
for them)."""

from __future__ import annotations

from dataclasses import dataclass

#: Verdicts from best to worst.
VERDICTS = ("ok", "unknown", "at-risk", "violated")


@dataclass(frozen=True)
class FeedFigures:
    """What a health hook reports of one feed at a scrape.

    :param verdict: the health view's verdict (``ok``, ``unknown``,
        ``at-risk``, ``violated``);
    :param watcher_age: seconds since a follower of the feed's collection
        last published its figures (a sequencer or an observer publishes
        about every second, quiet or not), None when none ever did;
    :param checkpoint_behind: commit order: seconds the checkpoint trails
        the newest public write (0 when caught up), None otherwise.
    """

    feed: str
    collection: str
    verdict: str
    watcher_age: float | None = None
    checkpoint_behind: float | None = None
