"""The PNG of throughput over the run's time, one line per case."""

from __future__ import annotations

import bisect
import json
import sys
from pathlib import Path

__all__ = ["plot_throughput", "rates_over_time", "replot"]


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
    from safebunny.optional import require

    require("matplotlib", "draw the benchmark's plots").use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(15, 7))
    cmap = plt.get_cmap("tab20")
    names = list(dict.fromkeys(label for label, _, _ in lines))  # one colour and one legend entry per case
    labelled: set[str] = set()
    for label, group, series in lines:
        xs, ys = rates_over_time(series, t0)
        if xs:
            i = names.index(label)
            ax.plot(xs, ys, label=None if label in labelled else label, color=cmap(i % 20),
                    linestyle="--" if group == "raw" else "-", linewidth=1.2)
            labelled.add(label)
    ax.set_xlabel("seconds since the run started")
    ax.set_ylabel("messages per second (log scale, 0.5 s bins)")
    ax.set_yscale("log")
    ax.set_ylim(bottom=50)
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=6.5, loc="center left", bbox_to_anchor=(1.0, 0.5))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def replot(json_path: Path, png_path: Path) -> None:
    """Redraw the plot from a results JSON that kept its series."""
    doc = json.loads(Path(json_path).read_text())
    if "series" not in doc:
        raise SystemExit(f"{json_path} has no 'series' (written before they were kept); run the benchmark again")
    lines = [(s["case"], s["group"], [(t, c) for t, c in s["points"]]) for s in doc["series"]]
    plot_throughput(lines, 0.0, png_path, f"safebunny {doc['command']}: throughput over time")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit("usage: python -m bench.plot <results.json> <out.png>")
    replot(Path(sys.argv[1]), Path(sys.argv[2]))
