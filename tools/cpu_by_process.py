"""Where a test run's CPU goes, by kind of process: ``python tools/cpu_by_process.py OUT.json [SECONDS]``.

Samples /proc every second (for SECONDS, or until killed) and writes, after each sample, the CPU seconds each kind
of process used since the sampler started: Spark driver JVMs, the Python workers by their module (a streaming
source's runner, a planning call, a UDF or data source task), the test processes, the broker and rabbitmqctl. A
process is classed when first seen (a ``spark-class`` shell that then execs the JVM keeps the JVM's class as
"spark jvm"); one that lives less than a second between two samples is missed. On 2 cores the suite is CPU-bound,
so this, not wall time per test, says what a cut would save (docs/operations.md, "What CI's time is made of").
"""

from __future__ import annotations

import json
import os
import re
import sys
import time

TICK = os.sysconf("SC_CLK_TCK")


def kind(cmd: str, name: str) -> str:
    """The class of a process from its command line (``name``: its kernel name, when the command line is gone)."""
    if not cmd.strip():
        return f"exited/{name}"
    first = cmd.split(" ")[0]
    if first.endswith("java") or "spark-class" in cmd:
        return "spark jvm" if ("SparkSubmit" in cmd or "pyspark-shell" in cmd or "spark-class" in cmd) \
            else "other jvm"
    if "beam.smp" in cmd:
        return "rabbitmqctl" if "escript" in cmd else "rabbitmq-server"
    for module in ("python_streaming_source_runner", "python_streaming_sink_runner"):
        if module in cmd:
            return f"python worker: {module}"
    if "pyspark.daemon" in cmd or "pyspark.worker" in cmd:
        return f"python worker: {cmd.split()[-1]}"
    if "exec(eval" in cmd or "pytest" in cmd:
        return "pytest (controller and xdist workers)"
    script = re.search(r"(\S+\.py)\b", cmd)
    return f"python: {os.path.basename(script.group(1))}" if script else os.path.basename(first)[:40]


def main(out: str, seconds: float) -> None:
    base: dict[tuple[str, str], float] = {}
    seen: dict[tuple[str, str], tuple[str, float]] = {}
    started, first = time.monotonic(), True
    while time.monotonic() - started < seconds:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/stat") as f:
                    stat = f.read()
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            key = (pid, fields[19])  # a pid and its start time: one process, not a reused pid
            cpu = (int(fields[11]) + int(fields[12])) / TICK
            if first:
                base[key] = cpu
            cpu -= base.get(key, 0.0)
            if cpu > 0:
                label = seen[key][0] if key in seen else kind(cmd, stat[stat.index("(") + 1:stat.rindex(")")])
                seen[key] = (label, cpu)
        first = False
        totals: dict[str, float] = {}
        for label, cpu in seen.values():
            totals[label] = totals.get(label, 0.0) + cpu
        with open(out, "w") as f:
            json.dump({"seconds": round(time.monotonic() - started), "cpu": dict(
                sorted(((k, round(v, 1)) for k, v in totals.items()), key=lambda kv: -kv[1]))}, f, indent=1)
        time.sleep(1)


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]) if len(sys.argv) > 2 else float("inf"))
