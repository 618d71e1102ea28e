"""Peak memory and CPU time of the processes involved, sampled with psutil while the benchmark runs.

Roles, found among the descendants of this (the driver's Python) process:

- ``driver_jvm``: the Spark driver JVM (``java ... SparkSubmit``);
- ``reader``: the driver-side Python process that runs a streaming source's ``latestOffset``
  and ``commit`` (``pyspark.sql.streaming.python_streaming_source_runner``), summed if several;
- ``workers``: the Python workers that run ``read``/``write`` (``pyspark.daemon pyspark.worker``),
  summed. Forked workers share pages with their daemon, so the sum of RSS over-counts a little;
- ``other_python``: Spark's other Python helpers (planning, data source lookup, the sink's commit);

and, for CPU only, ``harness`` (this process: the raw clients run here) and ``broker``
(``beam.smp``; on a shared broker it includes everyone else's load).
"""

from __future__ import annotations

import threading
import time

from safebunny.optional import require

psutil = require("psutil", "measure the benchmark's machine and memory")

__all__ = ["MemorySampler", "classify"]

MEMORY_ROLES = ("driver_jvm", "reader", "workers")


def classify(cmdline: list[str]) -> str | None:
    """The role of a process from its command line, or None when it is not one we track."""
    line = " ".join(cmdline)
    if "org.apache.spark.deploy.SparkSubmit" in line:
        return "driver_jvm"
    if "python_streaming_source_runner" in line:
        return "reader"
    if "pyspark.daemon" in line and line.rstrip().endswith("pyspark.worker"):
        return "workers"
    if "pyspark" in line and "python" in line:
        return "other_python"
    return None


def _cpu(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return times.user + times.system


class MemorySampler:
    """A background thread recording, every ``interval`` seconds, RSS (MB) per role and the
    cumulative CPU seconds per role (a process first seen mid-run counts from its start)."""

    def __init__(self, interval: float = 0.5, rescan: float = 1.5) -> None:
        self.interval, self.rescan = interval, rescan
        self._me = psutil.Process()
        self._tracked: dict[int, tuple[psutil.Process, str]] = {self._me.pid: (self._me, "harness")}
        self._last_cpu: dict[int, float] = {}
        self._cpu_total: dict[str, float] = {}
        for proc in psutil.process_iter(["name"]):
            if proc.info["name"] == "beam.smp":
                self._tracked[proc.pid] = (proc, "broker")
                try:
                    self._last_cpu[proc.pid] = _cpu(proc)  # count the broker from now on only
                except psutil.Error:
                    pass
        self._scanned = 0.0
        self.samples: list[tuple[float, dict[str, float]]] = []
        self.cpu_samples: list[tuple[float, dict[str, float]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="memory-sampler", daemon=True)

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

    def _sample(self) -> tuple[dict[str, float], dict[str, float]]:
        if time.monotonic() - self._scanned >= self.rescan:
            self._scan()
        totals: dict[str, float] = {}
        for pid, (proc, role) in list(self._tracked.items()):
            try:
                cpu = _cpu(proc)
                if role in MEMORY_ROLES:
                    totals[role] = totals.get(role, 0.0) + proc.memory_info().rss / 2**20
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                del self._tracked[pid]
                continue
            self._cpu_total[role] = self._cpu_total.get(role, 0.0) + cpu - self._last_cpu.get(pid, 0.0)
            self._last_cpu[pid] = cpu
        return totals, dict(self._cpu_total)

    def _run(self) -> None:
        while not self._stop.is_set():
            now = time.time()
            mem, cpu = self._sample()
            self.samples.append((now, mem))
            self.cpu_samples.append((now, cpu))
            self._stop.wait(self.interval)

    def peaks(self, start: float, end: float) -> dict[str, float]:
        """Peak MB per role within [start, end] (roles never seen are left out)."""
        out: dict[str, float] = {}
        for t, totals in self.samples:
            if start <= t <= end:
                for role, mb in totals.items():
                    out[role] = max(out.get(role, 0.0), mb)
        return {k: round(v, 1) for k, v in out.items()}

    def cpu_between(self, start: float, end: float) -> dict[str, float]:
        """CPU seconds per role from the last sample at or before ``start`` to the first at or after ``end``."""
        before = [c for t, c in self.cpu_samples if t <= start]
        after = [c for t, c in self.cpu_samples if t >= end]
        if not before or not after:
            return {}
        a, b = before[-1], after[0]
        return {role: round(b[role] - a.get(role, 0.0), 2) for role in b if b[role] - a.get(role, 0.0) > 0.005}
