"""Peak memory of the Spark processes, sampled with psutil while the benchmark runs.

Roles, found among the descendants of this (the driver's Python) process:

- ``driver_jvm``: the Spark driver JVM (``java ... SparkSubmit``);
- ``reader``: the driver-side Python process that runs a streaming source's ``latestOffset``
  and ``commit`` (``pyspark.sql.streaming.python_streaming_source_runner``), summed if several;
- ``workers``: the Python workers that run ``read``/``write`` (``pyspark.daemon pyspark.worker``),
  summed. Forked workers share pages with their daemon, so the sum of RSS over-counts a little.
"""

from __future__ import annotations

import threading
import time

import psutil

__all__ = ["MemorySampler", "classify"]


def classify(cmdline: list[str]) -> str | None:
    """The role of a process from its command line, or None when it is not one we track."""
    line = " ".join(cmdline)
    if "org.apache.spark.deploy.SparkSubmit" in line:
        return "driver_jvm"
    if "python_streaming_source_runner" in line:
        return "reader"
    if "pyspark.daemon" in line and line.rstrip().endswith("pyspark.worker"):
        return "workers"
    return None


class MemorySampler:
    """A background thread recording (time, MB per role) every ``interval`` seconds."""

    def __init__(self, interval: float = 0.5, rescan: float = 1.5) -> None:
        self.interval, self.rescan = interval, rescan
        self._tracked: dict[int, tuple[psutil.Process, str]] = {}
        self._scanned = 0.0
        self.samples: list[tuple[float, dict[str, float]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="memory-sampler", daemon=True)
        self._me = psutil.Process()

    def start(self) -> MemorySampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _scan(self) -> None:
        """Find the processes to track (walking /proc is the expensive part, so not every sample)."""
        for proc in self._me.children(recursive=True):
            if proc.pid not in self._tracked:
                try:
                    role = classify(proc.cmdline())
                except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                    continue
                if role is not None:
                    self._tracked[proc.pid] = (proc, role)
        self._scanned = time.monotonic()

    def _sample(self) -> dict[str, float]:
        if time.monotonic() - self._scanned >= self.rescan:
            self._scan()
        totals: dict[str, float] = {}
        for pid, (proc, role) in list(self._tracked.items()):
            try:
                totals[role] = totals.get(role, 0.0) + proc.memory_info().rss / 2**20
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                del self._tracked[pid]
        return totals

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.time(), self._sample()))
            self._stop.wait(self.interval)

    def peaks(self, start: float, end: float) -> dict[str, float]:
        """Peak MB per role within [start, end] (roles never seen are left out)."""
        out: dict[str, float] = {}
        for t, totals in self.samples:
            if start <= t <= end:
                for role, mb in totals.items():
                    out[role] = max(out.get(role, 0.0), mb)
        return {k: round(v, 1) for k, v in out.items()}
