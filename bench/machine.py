"""A description of the machine and the software a benchmark ran on."""

from __future__ import annotations

import os
import platform
import subprocess
from datetime import datetime, timezone
from importlib import metadata

from safebunny.optional import require

psutil = require("psutil", "measure the benchmark's machine and memory")

__all__ = ["describe_machine"]


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def _java() -> str:
    try:
        out = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=20)
        return (out.stderr or out.stdout).splitlines()[0].strip()
    except (OSError, subprocess.SubprocessError, IndexError):
        return "?"


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def describe_machine(broker: str) -> dict[str, str]:
    """CPU, memory, load, OS and the versions that matter, as strings."""
    load = os.getloadavg()
    return {
        "started": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "cpu": f"{_cpu_model()}, {psutil.cpu_count(logical=True)} logical cores",
        "memory": f"{psutil.virtual_memory().total / 2**30:.1f} GiB",
        "load average at start (1/5/15 min)": " / ".join(f"{x:.2f}" for x in load),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "java": _java(),
        "broker": broker,
        "pyspark": _version("pyspark"),
        "pika": _version("pika"),
        "rstream": _version("rstream"),
        "safebunny": _version("safebunny"),
    }
