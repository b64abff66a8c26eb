"""The race drawn from a run: ``openprocurement-feed race --plot FILE``.

One panel per run, one under the other, the same length of time in each. The x axis is the wall
clock, the y axis the ``public_modified`` stamp, both in ms from the start
of the panel's window:

* a write is a horizontal bar at the height of its stamp, from the moment
  of its stamp (on the diagonal "now") to its commit (its
  acknowledgement);
* the polling crawler's reads are dots at the height of the newest stamp it
  had been given: in the watermark order its offset, which it never goes
  back behind; the versions it was given are small crosses;
* a write whose bar ends under the crawler's line committed after the
  crawler had passed its stamp: the late document (red), which a crawler of
  that feed never gets.

The first panel is the anomaly with the largest lag the detector caught (a
run without the watermark); the others show a window of the same length, around the
write that stayed open longest, under the watermark and in the commit
order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..race.detector import CheckResult
from ..race.trace import RaceTrace, WriteMark
from . import pyplot, save

if TYPE_CHECKING:
    from matplotlib.axes import Axes

#: Time shown before the panel's write and after its commit (s).
PAD = 0.25


@dataclass(frozen=True)
class Panel:
    """One panel: a run's trace, its window and the write it is about."""

    trace: RaceTrace
    start: float
    end: float
    write: WriteMark | None
    anomaly: CheckResult | None = None

    def reached_at(self, moment: float) -> float | None:
        """The newest stamp the crawler had been given by ``moment``."""
        reached = None
        for read in self.trace.reads:
            if read.at > moment:
                break
            reached = read.reached
        return reached

    def given_at(self, write: WriteMark) -> float | None:
        """When the crawler was first given ``write``'s version, if it was."""
        return next(
            (each.at for each in self.trace.deliveries if each.id == write.id and each.stamp == write.stamp), None
        )

    def summary(self) -> str:
        """The panel's numbers in one sentence (for the caption)."""
        name = self.trace.label
        write = self.write
        if write is None:
            return f"{name}: no write in the run"
        text = f"{name}: a write open {write.open_ms:.0f} ms"
        given = self.given_at(write)
        if self.trace.order == "commit":
            if given is not None:
                text += f"; the crawler was given it {(given - write.acked) * 1000.0:.0f} ms after its commit"
            return text
        reached = self.reached_at(write.acked)
        if reached is not None:
            ahead = (reached - write.stamp) * 1000.0
            where = f"{ahead:.0f} ms past its stamp" if ahead > 0 else f"{-ahead:.0f} ms behind its stamp"
            text += f"; at its commit the crawler stood {where}"
        if self.anomaly is not None:
            lag = max(self.anomaly.lags_ms, default=0.0)
            text += f"; the detector saw it arrive {lag:g} ms behind the newest item it had read"
        return text


def _longest_open(trace: RaceTrace) -> WriteMark | None:
    """The write that stayed open longest in the middle of the run (the
    first and last tenths left out: the crawler is busy then)."""
    writes = trace.writes
    if not writes:
        return None
    first, last = writes[0].stamp, writes[-1].stamp
    margin = (last - first) / 10.0
    middle = [write for write in writes if first + margin <= write.stamp <= last - margin] or writes
    return max(middle, key=lambda write: write.open_ms)


def panels(traces: Sequence[RaceTrace]) -> list[Panel]:
    """The panels of ``traces``: the anomaly the detector caught with the
    largest lag (in the first run that has one) first, then the other runs,
    each window as long as the first."""
    chosen: list[Panel] = []
    rest = list(traces)
    for trace in traces:
        caught = []
        for anomaly in trace.anomalies:
            late = max(anomaly.late, key=lambda item: (anomaly.newest or 0.0) - item.public_modified)
            write = trace.write_of(late.id, late.public_modified)
            if write is not None:
                caught.append((max(anomaly.lags_ms, default=0.0), write, anomaly))
        if caught:
            _, write, anomaly = max(caught, key=lambda each: each[0])  # the clearest: the largest lag
            chosen.append(Panel(trace, write.stamp - PAD, write.acked + PAD, write, anomaly))
            rest.remove(trace)
            break
    length = (chosen[0].end - chosen[0].start) if chosen else None
    for trace in rest:
        write = _longest_open(trace)
        if write is None:
            continue
        span = length if length is not None else write.acked - write.stamp + 2 * PAD
        length = span
        chosen.append(Panel(trace, write.stamp - PAD, write.stamp - PAD + span, write))
    return chosen


def _draw(ax: Axes, panel: Panel) -> None:
    origin = panel.start
    trace = panel.trace

    def ms(value: float) -> float:
        return (value - origin) * 1000.0

    width = ms(panel.end)
    ax.plot([0, width], [0, width], color="0.6", linestyle=":", linewidth=1, label="now (stamp = clock)")
    if trace.order == "watermark" and trace.watermark > 0:
        shift = trace.watermark * 1000.0
        ax.plot(
            [0, width],
            [-shift, width - shift],
            color="tab:purple",
            linestyle="--",
            linewidth=1,
            label=f"what the feed shows: stamps below now − {trace.watermark:g} s",
        )
    for write in trace.writes:
        if write.acked < panel.start or write.stamp > panel.end:
            continue
        late = write is panel.write and panel.anomaly is not None
        ax.plot(
            [ms(write.stamp), ms(write.acked)],
            [ms(write.stamp)] * 2,
            color="tab:red" if late else "tab:blue",
            zorder=4 if late else 2,
            linewidth=3 if late else 1.5,
            solid_capstyle="butt",
            marker="|",
            markevery=[1],
            markersize=8,
        )
    reads = [read for read in trace.reads if panel.start <= read.at <= panel.end and read.reached is not None]
    if reads:
        ax.step(
            [ms(read.at) for read in reads],
            [ms(read.reached) for read in reads if read.reached is not None],
            where="post",
            color="tab:green",
            linewidth=1.2,
            marker="o",
            markersize=3,
            label="crawler: each read, at the newest stamp it had been given"
            + (" (its offset is a commit position)" if trace.order == "commit" else ""),
        )
    given = [each for each in trace.deliveries if panel.start <= each.at <= panel.end]
    if given:
        ax.plot(
            [ms(each.at) for each in given],
            [ms(each.stamp) for each in given],
            linestyle="none",
            marker="x",
            markersize=4,
            color="tab:green",
            alpha=0.6,
            label="a version the crawler was given",
        )
    if panel.anomaly is not None and panel.write is not None:
        snapshot = panel.anomaly
        if snapshot.taken is not None and snapshot.newest is not None:
            ax.plot(
                [ms(snapshot.taken)],
                [ms(snapshot.newest)],
                linestyle="none",
                marker="*",
                markersize=12,
                color="tab:orange",
                label="detector's read: the newest item, where a crawler's offset stands",
            )
            ax.hlines(ms(snapshot.newest), ms(snapshot.taken), width, color="tab:orange", linestyle="--", linewidth=1)
        ax.annotate(
            "late: committed after a reader\nhad passed its stamp",
            xy=(ms(panel.write.acked), ms(panel.write.stamp)),
            xytext=(12, -28),
            textcoords="offset points",
            color="tab:red",
            fontsize=8,
            arrowprops={"arrowstyle": "->", "color": "tab:red"},
        )
    ax.plot([], [], color="tab:blue", marker="|", label="a write: from its stamp to its commit")
    if panel.anomaly is not None:
        ax.plot([], [], color="tab:red", linewidth=3, label="the late document")
    ax.set_title(trace.label + (": the anomaly the detector caught" if panel.anomaly else ""), fontsize=10)
    ax.set_xlabel("wall clock (ms)")
    ax.set_ylabel("public_modified stamp (ms)")
    ax.set_xlim(0, width)
    ax.grid(True, color="0.92")
    ax.legend(fontsize=7.5, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2, frameon=False)


def plot_race(traces: Sequence[RaceTrace], path: str) -> list[str]:
    """Draw the race timeline of ``traces`` into ``path`` (SVG or PNG by its
    extension); returns one sentence of numbers per panel."""
    chosen = panels(traces)
    plt = pyplot()
    rows = max(1, len(chosen))
    figure, axes = plt.subplots(rows, 1, figsize=(8.0, 5.6 * rows), squeeze=False)
    for ax, panel in zip(axes[:, 0], chosen, strict=False):
        _draw(ax, panel)
    if not chosen:
        axes[0][0].text(0.5, 0.5, "no writes recorded", ha="center", va="center")
    figure.tight_layout()
    save(figure, path)
    return [panel.summary() for panel in chosen]
