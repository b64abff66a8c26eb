"""The soak's figure for the docs (``--plot FILE``): per minute, every
process's RSS, the open descriptors and database connections, each
collection's documents, and the change rate with the p99s."""

from __future__ import annotations

from collections.abc import Sequence

from .figures import TIMINGS, Sample, collection_figure, fds_of, field_of, rss_of, series


def plot_soak(samples: Sequence[Sample], warm_up: float, path: str, note: str = "") -> str:
    """Draw the four panels into ``path`` (.svg or .png)."""
    from openprocurement_feed.plots import pyplot, save

    plt = pyplot()
    figure, axes = plt.subplots(2, 2, figsize=(12, 7.5), sharex=True)
    (rss, fds), (sizes, timing) = axes
    for axis in (rss, fds, sizes):
        axis.set_prop_cycle(color=plt.get_cmap("tab20").colors)
    roles = list(dict.fromkeys(role for sample in samples for role in sample.processes))
    for role in roles:
        points = series(samples, rss_of(role))
        rss.plot(*zip(*points, strict=True), label=role, linewidth=1.2)
        counts = series(samples, fds_of(role))
        fds.plot(*zip(*counts, strict=True), label=role, linewidth=1.0)
    connections = series(samples, lambda s: s.connections)
    if connections:
        fds.plot(*zip(*connections, strict=True), label="db connections", color="black", linestyle="--")
    rss.set_ylabel("RSS (MB)")
    rss.set_yscale("log")
    fds.set_ylabel("open fds / connections")
    names = sorted({name for sample in samples for name in sample.collections})
    for name in names:
        # documents, not bytes: the embedded server's oplog gives its entries only
        points = [(x, y) for x, y in series(samples, collection_figure(name, 0)) if y > 0]
        if points:
            sizes.plot(*zip(*points, strict=True), label=name.removeprefix("openprocurement."), linewidth=1.2)
    sizes.set_ylabel("documents per collection")
    sizes.set_yscale("log")
    for label, attribute in TIMINGS:
        points = series(samples, field_of(attribute))
        if points:
            timing.plot(*zip(*points, strict=True), label=label, linewidth=1.2)
    timing.set_ylabel("ms")
    rate = timing.twinx()
    rate.plot(*zip(*series(samples, lambda s: s.rate), strict=True), color="grey", linewidth=0.8, label="changes/s")
    rate.set_ylabel("changes/s", color="grey")
    rate.set_ylim(bottom=0)
    for axis in (rss, fds, sizes, timing):
        axis.axvspan(0, warm_up, color="0.92", zorder=0)
        axis.grid(alpha=0.3)
        axis.legend(fontsize=7, loc="upper left", ncol=2)
    for axis in (sizes, timing):
        axis.set_xlabel("minutes (grey: the warm-up)")
    figure.suptitle(f"make soak: the production shape for {samples[-1].minute:.0f} minutes{note}", fontsize=11)
    return save(figure, path)
