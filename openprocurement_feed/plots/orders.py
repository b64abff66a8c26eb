"""The two orders side by side: the charts of ``python -m benchmarks orders --plot DIR``.

Three pictures from the benchmark's runs (:class:`~openprocurement_feed.race.experiment.RunResult`,
keyed by order, ``watermark`` and ``commit``):

* ``orders-delay``: the distribution of the delay from an acknowledged
  write to the crawler holding it, per order and per crawler (polling and
  long-polling), as cumulative curves on a log axis;
* ``orders-cpu``: the database's CPU per patch of each run, per order, for
  the seed's load and for the hot scenario;
* ``orders-hot``: the hot scenario's longest time out of sight, per run.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from ..race.experiment import RunResult, delay_summary
from . import pyplot, save

if TYPE_CHECKING:
    from matplotlib.axes import Axes

#: How each order is drawn.
COLOURS = {"watermark": "tab:purple", "commit": "tab:green"}
#: The charts' file names (without the extension).
NAMES = ("orders-delay", "orders-cpu", "orders-hot")

Runs = Mapping[str, Sequence[RunResult]]


def _label(order: str, runs: Sequence[RunResult]) -> str:
    if order == "commit" or not runs:
        return "commit order" if order == "commit" else order
    return f"watermark W = {runs[0].watermark:g} s"


def plot_delays(runs: Runs, path: str) -> str:
    """The delay distributions (every round pooled) into ``path``."""
    plt = pyplot()
    figure, ax = plt.subplots(figsize=(7.5, 4.2))
    for order, results in runs.items():
        for crawler, style in (("polling", "-"), ("longpoll", "--")):
            delays = sorted(value for result in results for value in result.delays.get(crawler, ()))
            if not delays:
                continue
            shares = [(number + 1) / len(delays) for number in range(len(delays))]
            median = delay_summary(delays)["median"] or 0.0  # as the benchmark prints it
            ax.step(
                [max(value, 0.1) for value in delays],
                shares,
                where="post",
                linestyle=style,
                color=COLOURS.get(order, "tab:gray"),
                label=f"{_label(order, results)}, {'long-poll' if crawler == 'longpoll' else 'polling'} crawler "
                f"(median {median:.0f} ms, {len(delays)} versions)",
            )
    ax.set_xscale("log")
    ax.set_xlabel("delay from the write's acknowledgement to the crawler (ms, log scale)")
    ax.set_ylabel("share of the versions delivered")
    ax.set_ylim(0, 1.02)
    ax.grid(True, which="both", color="0.92")
    ax.legend(fontsize=8, loc="upper left")
    figure.tight_layout()
    return save(figure, path)


def _cpu_group(ax: Axes, runs: Runs, centre: float, title: str) -> list[tuple[float, str]]:
    """The runs' CPU per patch around ``centre``: a bar at the median, a
    dot per run; returns the tick positions and labels."""
    ticks = []
    for number, (order, results) in enumerate(runs.items()):
        values = [value for value in (result.database_cpu_ms_per_patch for result in results) if value is not None]
        if not values:
            continue
        x = centre + (number - 0.5) * 0.4
        median = statistics.median(values)
        ax.bar(x, median, width=0.36, color=COLOURS.get(order, "tab:gray"), alpha=0.55)
        ax.plot([x] * len(values), values, linestyle="none", marker="o", color="black", markersize=4)
        ax.annotate(
            f"{median:.2f}",
            (x, median),
            ha="center",
            va="bottom",
            fontsize=8,
            xytext=(0, 2),
            textcoords="offset points",
        )
        ticks.append((x, f"{title}\n{'commit' if order == 'commit' else 'watermark'}"))
    return ticks


def plot_cpu(runs: Runs, hot: Runs, path: str) -> str:
    """The database's CPU per patch per order (seed load, hot scenario) into ``path``."""
    plt = pyplot()
    figure, ax = plt.subplots(figsize=(7.0, 4.0))
    ticks = _cpu_group(ax, runs, 0.0, "seed load")
    if any(hot.values()):
        ticks += _cpu_group(ax, hot, 1.2, "hot tenders")
    ax.set_xticks([x for x, _ in ticks], [label for _, label in ticks], fontsize=8)
    ax.set_ylabel("database CPU per patch (ms)")
    ax.grid(True, axis="y", color="0.92")
    ax.set_title("bar: median of the rounds; dots: each run", fontsize=9)
    figure.tight_layout()
    return save(figure, path)


def plot_hot(hot: Runs, path: str) -> str:
    """The hot scenario's longest time out of sight, per run, into ``path``."""
    plt = pyplot()
    figure, ax = plt.subplots(figsize=(6.0, 3.6))
    labels, values, colours = [], [], []
    for order, results in hot.items():
        for number, result in enumerate(results, 1):
            if result.longest_invisible_s is None:
                continue
            labels.append(f"{'commit' if order == 'commit' else f'W = {result.watermark:g} s'}\nrun {number}")
            values.append(result.longest_invisible_s)
            colours.append(COLOURS.get(order, "tab:gray"))
    bars = ax.bar(range(len(values)), values, color=colours)
    ax.bar_label(bars, labels=[f"{value:.2f} s" for value in values], fontsize=8)
    ax.set_xticks(range(len(values)), labels, fontsize=8)
    ax.set_ylabel("longest time an acknowledged\nchange stayed out of sight (s)")
    ax.grid(True, axis="y", color="0.92")
    figure.tight_layout()
    return save(figure, path)


def plot_orders(runs: Runs, hot: Runs, directory: str, extension: str = ".svg") -> list[str]:
    """The three charts into ``directory`` (``orders-delay.svg``...); the
    hot chart only when there were hot runs. Returns the paths written."""
    paths = [
        plot_delays(runs, os.path.join(directory, NAMES[0] + extension)),
        plot_cpu(runs, hot, os.path.join(directory, NAMES[1] + extension)),
    ]
    if any(hot.values()):
        paths.append(plot_hot(hot, os.path.join(directory, NAMES[2] + extension)))
    return paths
