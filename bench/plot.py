"""The PNG of throughput over the run's time, one line per case."""

from __future__ import annotations

import bisect
from pathlib import Path

__all__ = ["plot_throughput", "rates_over_time"]


def rates_over_time(series: list[tuple[float, int]], t0: float, bin_s: float = 0.5) -> tuple[list[float], list[float]]:
    """From cumulative (time, count) points to a step line of msg/s in bins of ``bin_s`` seconds
    (the count is interpolated linearly between points), as (seconds since t0, msg/s)."""
    if len(series) < 2 or series[-1][0] <= series[0][0]:
        return [], []
    times = [t for t, _ in series]
    counts = [c for _, c in series]

    def at(t: float) -> float:
        i = bisect.bisect_right(times, t)
        if i <= 0:
            return counts[0]
        if i >= len(times):
            return counts[-1]
        ta, tb, ca, cb = times[i - 1], times[i], counts[i - 1], counts[i]
        return ca + (cb - ca) * (t - ta) / (tb - ta) if tb > ta else cb

    xs, ys = [], []
    edge = times[0]
    while edge < times[-1]:
        nxt = min(edge + bin_s, times[-1])
        rate = (at(nxt) - at(edge)) / (nxt - edge) if nxt > edge else 0.0
        xs += [edge - t0, nxt - t0]
        ys += [rate, rate]
        edge = nxt
    return xs, ys


def plot_throughput(lines: list[tuple[str, str, list[tuple[float, int]]]], t0: float, path: Path,
                    title: str) -> None:
    """``lines`` are (label, group, cumulative series); raw ceilings dashed, connector cases solid."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(14, 6))
    cmap = plt.get_cmap("tab20")
    for i, (label, group, series) in enumerate(lines):
        xs, ys = rates_over_time(series, t0)
        if xs:
            ax.plot(xs, ys, label=label, color=cmap(i % 20), linestyle="--" if group == "raw" else "-",
                    linewidth=1.2)
    ax.set_xlabel("seconds since the run started")
    ax.set_ylabel("messages per second (log scale, 0.5 s bins)")
    ax.set_yscale("log")
    ax.set_ylim(bottom=50)
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
