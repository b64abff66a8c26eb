"""The production shape and the production-shaped test, drawn.

* :func:`plot_shape`: the processes of docs/deploying.rst (web workers
  under gunicorn, sequencers, the MongoDB replica set, Prometheus, the
  crawlers) and what flows between them; ``python -m
  openprocurement_feed.plots shape FILE``.
* :func:`plot_ops_timeline`: a run of ``ops/e2e.py`` (``make test-ops``)
  over time: the writes per second, each version's delay to the crawler,
  the checkpoint's age, the moment of each ``kill -9`` and of the outage,
  and the alert pending, firing and resolved; ``ops/e2e.py --plot FILE``.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from . import pyplot, save

#: The boxes of the shape: name, centre (x, y), lines of text, colour.
BOXES = (
    ("clients", (1.0, 5.2), "writers\n(brokers' PATCH, POST)", "#dbe9f6"),
    ("crawlers", (1.0, 1.4), "crawlers\nGET /tenders?offset=…\n(feed=longpoll)", "#dbe9f6"),
    (
        "web",
        (4.2, 3.3),
        "gunicorn: web workers ×N\nPyramid app + feed views\nsave_data stamps public_modified",
        "#fde2c4",
    ),
    (
        "mongo",
        (8.0, 3.3),
        "MongoDB replica set\n(primary + secondaries)\ndocuments, feed entries,\ncheckpoint",
        "#d9f0d3",
    ),
    ("sequencers", (8.0, 0.9), "sequencers ×2\nopenprocurement-feed sequence\n(both always running)", "#e8dcf2"),
    ("prometheus", (4.2, 6.0), "Prometheus\nalerts.yml: FeedPromiseAtRisk", "#f6d5d5"),
)
#: The arrows: start, end, label, the label's centre.
FLOWS = (
    ((1.0, 4.55), (2.7, 3.6), "writes (HTTP)", (1.55, 3.85)),
    ((2.7, 3.0), (1.0, 2.05), "feed pages,\nnext_page.offset", (1.35, 2.65)),
    ((5.7, 3.3), (6.5, 3.3), "writes in\ntransactions;\nfeed queries", (6.1, 4.3)),
    ((7.5, 2.65), (7.5, 1.55), "change\nstream", (6.75, 2.1)),
    ((8.5, 1.55), (8.5, 2.65), "positions +\ncheckpoint", (9.3, 2.1)),
    ((4.2, 5.35), (4.2, 3.95), "scrape /metrics,\nhealth view", (5.1, 4.65)),
)
BOX_SIZE = (2.9, 1.25)


def plot_shape(path: str, workers: int = 3, sequencers: int = 2) -> str:
    """The production shape into ``path`` (``workers`` and ``sequencers``
    as deployed, e.g. by ``make test-ops``)."""
    plt = pyplot()  # first: without matplotlib, PlotExtraMissing
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

    figure, ax = plt.subplots(figsize=(9.5, 6.2))
    width, height = BOX_SIZE
    for _, (x, y), text, colour in BOXES:
        text = text.replace("×N", f"×{workers}").replace("sequencers ×2", f"sequencers ×{sequencers}")
        ax.add_patch(
            FancyBboxPatch(
                (x - width / 2, y - height / 2),
                width,
                height,
                boxstyle="round,pad=0.05",
                facecolor=colour,
                edgecolor="0.3",
            )
        )
        ax.text(x, y, text, ha="center", va="center", fontsize=8.5)
    for start, end, label, (x, y) in FLOWS:
        ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=14, color="0.25"))
        ax.text(x, y, label, ha="center", va="center", fontsize=7.5, color="0.15")
    ax.set_xlim(-0.6, 10.0)
    ax.set_ylim(-0.1, 6.9)
    ax.set_axis_off()
    figure.tight_layout()
    return save(figure, path)


@dataclass
class OpsRun:
    """What one run of the production-shaped test recorded, on its clock
    (seconds since the test began).

    :param acks: each acknowledged version's time.
    :param seen: when the crawler first held each version.
    :param checkpoints: ``(t, checkpoint age s or None)`` samples of the health view.
    :param events: ``(t, what)``: the kills, the outage, the restart.
    :param alerts: ``(t, state)`` of the alert: pending, firing, inactive.
    """

    acks: Mapping[tuple[str, str], float]
    seen: Mapping[tuple[str, str], float]
    checkpoints: Sequence[tuple[float, float | None]] = ()
    events: Sequence[tuple[float, str]] = ()
    alerts: Sequence[tuple[float, str]] = ()
    threshold: float | None = None
    figures: dict[str, float] = field(default_factory=dict)

    def writes_per_second(self) -> tuple[list[int], list[int]]:
        """Whole seconds and the versions acknowledged in each."""
        counts = Counter(int(moment) for moment in self.acks.values())
        if not counts:
            return [], []
        seconds = list(range(min(counts), max(counts) + 1))
        return seconds, [counts.get(second, 0) for second in seconds]

    def delays(self) -> list[tuple[float, float]]:
        """``(acknowledged at, seconds until the crawler held it)`` of every
        version the crawler held."""
        return sorted(
            (acked, max(0.0, self.seen[version] - acked))
            for version, acked in self.acks.items()
            if version in self.seen
        )


def plot_ops_timeline(run: OpsRun, path: str) -> str:
    """The production-shaped test's timeline into ``path``."""
    plt = pyplot()
    figure, (writes, lag, age) = plt.subplots(3, 1, figsize=(9.5, 7.0), sharex=True)
    seconds, counts = run.writes_per_second()
    writes.bar(seconds, counts, width=1.0, align="edge", color="tab:blue")
    writes.set_ylabel("writes/s\n(acknowledged)")
    delays = run.delays()
    lag.plot(
        [at for at, _ in delays],
        [delay for _, delay in delays],
        linestyle="none",
        marker=".",
        markersize=2,
        color="tab:green",
        rasterized=True,  # thousands of dots: an image inside the SVG
    )
    lag.set_yscale("log")
    lag.set_ylabel("crawler lag (s)\nack → crawler, log")
    points = [(at, value) for at, value in run.checkpoints if value is not None]
    age.plot([at for at, _ in points], [value for _, value in points], color="tab:purple")
    if run.threshold is not None:
        age.axhline(run.threshold, color="tab:purple", linestyle=":", linewidth=1)
        age.text(0, run.threshold, f" threshold {run.threshold:g} s", fontsize=7, va="bottom", color="tab:purple")
    age.set_ylabel("checkpoint age (s)")
    age.set_xlabel("seconds since the test began")
    for ax in (writes, lag, age):
        ax.grid(True, color="0.92")
        for moment, _ in run.events:
            ax.axvline(moment, color="tab:red", linewidth=1)
    for moment, what in run.events:
        writes.annotate(
            what,
            (moment, 1.02),
            xycoords=("data", "axes fraction"),
            rotation=30,
            fontsize=7,
            va="bottom",
            ha="left",
            color="tab:red",
        )
    spans = _alert_spans(run.alerts)
    for start, end, state in spans:
        for ax in (writes, lag, age):
            ax.axvspan(start, end, color="tab:orange" if state == "firing" else "gold", alpha=0.25, linewidth=0)
    if spans:
        age.plot([], [], color="gold", linewidth=6, alpha=0.5, label="alert pending")
        age.plot([], [], color="tab:orange", linewidth=6, alpha=0.5, label="alert firing")
        age.legend(fontsize=7, loc="upper left")
    figure.tight_layout()
    return save(figure, path)


def _alert_spans(changes: Sequence[tuple[float, str]]) -> list[tuple[float, float, str]]:
    """The alert's pending and firing spans from its changes of state."""
    spans = []
    for (start, state), (end, _) in itertools.pairwise(changes):
        if state in ("pending", "firing"):
            spans.append((start, end, state))
    if changes and changes[-1][1] in ("pending", "firing"):
        spans.append((changes[-1][0], changes[-1][0] + 1.0, changes[-1][1]))
    return spans
