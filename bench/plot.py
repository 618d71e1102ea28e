"""The PNG of throughput over the run's time, one line per case."""

from __future__ import annotations

from pathlib import Path

__all__ = ["plot_throughput", "rates_over_time"]


def rates_over_time(series: list[tuple[float, int]], t0: float) -> tuple[list[float], list[float]]:
    """From cumulative (time, count) points to (seconds since t0, msg/s between points)."""
    xs, ys = [], []
    for (ta, ca), (tb, cb) in zip(series, series[1:], strict=False):
        if tb > ta:
            xs += [ta - t0, tb - t0]
            ys += [(cb - ca) / (tb - ta)] * 2
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
    ax.set_ylabel("messages per second")
    ax.set_yscale("log")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
