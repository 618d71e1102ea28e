"""Watching the demo run: per-step throughput from Spark's progress events, per-queue backlog
sampled from the broker, a progress bar, and the chart of both as a PNG (:func:`write_chart`)."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["Monitor", "write_chart"]


class Monitor:
    """Collects ``throughput[step] = [(t, msg/s)]`` and ``backlog[step] = [(t, depth)]``.

    ``queues`` maps a step's label to its queue name. ``expected`` is how many messages the steps
    should process in all (the progress bar's total). Use as a context manager around the run.
    """

    def __init__(self, spark: Any, uri: str, queues: Mapping[str, str], expected: int,
                 every: float = 0.5, show_bar: bool = True) -> None:
        self.spark, self.uri, self.queues, self.expected = spark, uri, dict(queues), expected
        self.every, self.show_bar = every, show_bar
        self.throughput: dict[str, list[tuple[float, float]]] = defaultdict(list)
        self.backlog: dict[str, list[tuple[float, int]]] = defaultdict(list)
        self.processed: dict[str, int] = defaultdict(int)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._start = time.monotonic()
        self._thread = threading.Thread(target=self._sample, name="demo-monitor", daemon=True)
        self._listener: Any = None
        self._bar: Any = None

    # Spark progress ------------------------------------------------------------------------
    def _on_progress(self, name: str | None, rows: int, duration_ms: int) -> None:
        if not name:
            return
        label = self._label(name)
        with self._lock:
            self.processed[label] += rows
            t = time.monotonic() - self._start
            rate = rows / max(duration_ms / 1000.0, 1e-3)
            self.throughput[label].append((t, rate))
            if self._bar is not None:
                done = min(self.expected, sum(self.processed.values()))
                self._bar.update(done - self._bar.n)

    def _label(self, query_name: str) -> str:
        return next((label for label in self.queues if query_name.endswith(label)), query_name)

    def __enter__(self) -> Monitor:
        from pyspark.sql.streaming import StreamingQueryListener

        monitor = self

        class _Listener(StreamingQueryListener):
            def onQueryStarted(self, event: Any) -> None:
                pass

            def onQueryProgress(self, event: Any) -> None:
                p = event.progress
                monitor._on_progress(p.name, int(p.numInputRows), int(p.durationMs.get("triggerExecution", 0)))

            def onQueryTerminated(self, event: Any) -> None:
                pass

        self._listener = _Listener()
        self.spark.streams.addListener(self._listener)
        if self.show_bar:
            from safebunny.optional import INSTALL, available

            if available("tqdm"):
                from tqdm import tqdm

                self._bar = tqdm(total=self.expected, unit="msg", desc="saga steps", dynamic_ncols=True)
            else:
                print(f"(no progress bar: pip install {INSTALL['tqdm']} to see one)")
        self._start = time.monotonic()
        self._thread.start()
        return self

    # broker depths -------------------------------------------------------------------------
    def _sample(self) -> None:
        from safebunny.amqp.connection import open_blocking

        conn = open_blocking(self.uri, action="sample the demo's queue depths", name="safebunny/demo/monitor")
        try:
            channel = conn.channel()
            while not self._stop.is_set():
                t = time.monotonic() - self._start
                for label, queue in self.queues.items():
                    depth = channel.queue_declare(queue, passive=True).method.message_count
                    with self._lock:
                        self.backlog[label].append((t, depth))
                self._stop.wait(self.every)
        finally:
            conn.close()

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        if self._listener is not None:
            self.spark.streams.removeListener(self._listener)
        if self._bar is not None:
            self._bar.update(self.expected - self._bar.n)
            self._bar.close()

    @property
    def elapsed(self) -> float:
        """Seconds since the monitor started."""
        return time.monotonic() - self._start


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
