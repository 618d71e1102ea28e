"""The demo's chart: throughput and backlog per step over time, as a PNG."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["write_chart"]


def write_chart(path: Path, throughput: Mapping[str, Sequence[tuple[float, float]]],
                backlog: Mapping[str, Sequence[tuple[float, int]]], title: str) -> Path:
    """Draw ``throughput`` (step -> (seconds since start, messages/s)) above ``backlog``
    (step -> (seconds, messages waiting)) and save the PNG at ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
    for step, points in throughput.items():
        if points:
            xs, ys = zip(*points, strict=True)
            top.step(xs, ys, where="post", label=step)
    for step, points in backlog.items():
        if points:
            xs, ys = zip(*points, strict=True)
            bottom.plot(xs, ys, label=step)
    top.set_ylabel("messages/s (per micro-batch)")
    top.set_title(title)
    bottom.set_ylabel("backlog (ready in queue)")
    bottom.set_xlabel("seconds since the saga started")
    for ax in (top, bottom):
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="upper right", fontsize="small")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
