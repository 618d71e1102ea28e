"""Where the time goes in one benchmark step: py-spy over every Python process of the run.

    .venv/bin/python -m bench.profile "connector classic"        # any --only label of bench.run
    .venv/bin/python -m bench.profile "sweep 10k" --top 25 --jfr   # and the driver JVM, with Flight Recorder
    .venv/bin/python -m bench.profile "bench.bench_source --rounds 1 --kinds quorum"   # another bench module

It runs ``python -m bench.run --quick --only <label>`` under ``py-spy record --subprocesses``
(raw collapsed stacks), and meanwhile samples the CPU time of the driver JVM, the reader process,
the Python workers and the broker (``beam.smp``). It prints, per process role, the CPU seconds
and the functions with the most samples (inclusive and self). Needs ``py-spy`` (``pip install
py-spy``) and permission to ptrace the processes (root, or ``kernel.yama.ptrace_scope=0``).
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.memory import classify, psutil

__all__ = ["main", "summarize_jfr", "summarize_raw"]

_PROCESS = re.compile(r'^process \d+:"(?P<cmd>[^"]*)"$')
_FRAME = re.compile(r"^(?P<fn>.*?) \((?P<file>[^():]*?)(?::\d+)?\)$")


def _role(cmdline: str) -> str:
    return classify(cmdline.split()) or ("bench driver (python)" if "bench." in cmdline else "other python")


def summarize_raw(lines: list[str], top: int) -> dict[str, dict[str, list[tuple[str, int]] | int]]:
    """From py-spy raw lines to {role: {"samples": n, "inclusive": [...], "self": [...]}}."""
    incl: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    self_: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    totals: collections.Counter[str] = collections.Counter()
    for line in lines:
        stack, _, count_text = line.rstrip("\n").rpartition(" ")
        if not count_text.isdigit():
            continue
        count = int(count_text)
        role, frames = "other python", []
        for part in stack.split(";"):
            match = _PROCESS.match(part)
            if match:
                role = _role(match.group("cmd"))
                frames = []
                continue
            frame = _FRAME.match(part)
            if frame:
                frames.append(f"{frame.group('fn')} ({frame.group('file')})")
        totals[role] += count
        for name in set(frames):
            incl[role][name] += count
        if frames:
            self_[role][frames[-1]] += count
    return {role: {"samples": totals[role], "inclusive": incl[role].most_common(top),
                   "self": self_[role].most_common(top)} for role in totals}


def summarize_jfr(text: str, top: int) -> dict[str, dict[str, list[tuple[str, int]] | int]]:
    """From ``jfr print --events jdk.ExecutionSample`` to {thread group: {"samples", "inclusive", "self"}}."""
    incl: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    self_: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    totals: collections.Counter[str] = collections.Counter()
    for event in text.split("jdk.ExecutionSample {")[1:]:
        thread = re.search(r'sampledThread = "([^"]*)"', event)
        group = re.sub(r"[0-9.]+", "N", thread.group(1)) if thread else "?"
        group = re.sub(r" \(TID N\)|for task N in stage N", "", group).strip()
        body = event.split("stackTrace = [", 1)[-1].split("]", 1)[0]
        frames = [re.sub(r"\s+line:.*$", "", ln.strip()) for ln in body.splitlines()
                  if ln.strip() and not ln.strip().startswith("...")]
        if not frames:
            continue
        totals[group] += 1
        self_[group][frames[0]] += 1
        for f in set(frames):
            incl[group][f] += 1
    return {g: {"samples": totals[g], "inclusive": incl[g].most_common(top), "self": self_[g].most_common(top)}
            for g in totals}


def _print_summary(summary: dict[str, dict[str, list[tuple[str, int]] | int]], unit: str) -> None:
    for role, data in sorted(summary.items(), key=lambda kv: -int(kv[1]["samples"])):  # type: ignore[arg-type]
        print(f"\n-- {role}: {data['samples']} samples {unit}")
        print("   inclusive:")
        for name, n in data["inclusive"]:  # type: ignore[union-attr]
            print(f"   {n:6d}  {name}")
        print("   self:")
        for name, n in data["self"]:  # type: ignore[union-attr]
            print(f"   {n:6d}  {name}")


def _cpu_sampler(root: int, stop: threading.Event, out: dict[str, float]) -> None:
    """Keep the latest CPU seconds per role among root's descendants and the broker."""
    seen: dict[int, tuple[str, float]] = {}
    while not stop.is_set():
        try:
            procs = psutil.Process(root).children(recursive=True)
        except psutil.NoSuchProcess:
            break
        procs += [p for p in psutil.process_iter(["name"]) if p.info["name"] == "beam.smp"]
        for proc in procs:
            try:
                name = proc.name()
                role = "broker (beam.smp)" if name == "beam.smp" else (classify(proc.cmdline()) or "")
                if role:
                    cpu = proc.cpu_times()
                    seen[proc.pid] = (role, cpu.user + cpu.system)
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
        stop.wait(0.5)
    for role, secs in seen.values():
        out[role] = out.get(role, 0.0) + secs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.profile", description=__doc__.splitlines()[0])
    parser.add_argument("only", help="the bench.run --only label, e.g. 'connector classic'; or a bench module "
                                     "with its arguments, e.g. 'bench.bench_source --rounds 1'")
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--rate", type=int, default=50, help="py-spy samples per second")
    parser.add_argument("--jfr", action="store_true",
                        help="also record the driver JVM with Java Flight Recorder and summarise its samples")
    args = parser.parse_args(argv)
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(spy).exists():
        parser.error("py-spy is not installed: run `.venv/bin/pip install py-spy`")
    raw = Path(tempfile.mkstemp(prefix="safebunny-profile-", suffix=".raw")[1])
    broker_before = {p.pid: sum(p.cpu_times()[:2]) for p in psutil.process_iter(["name"])
                     if p.info["name"] == "beam.smp"}
    cmd = [spy, "record", "--subprocesses", "--nonblocking", "--format", "raw", "--rate", str(args.rate),
           "--output", str(raw), "--", sys.executable, "-m"]
    cmd += args.only.split() if args.only.startswith("bench.") else ["bench.run", "--quick", "--only", args.only]
    started = time.time()
    env = os.environ.copy()
    jfr_file = Path(tempfile.mkstemp(prefix="safebunny-profile-", suffix=".jfr")[1]) if args.jfr else None
    if jfr_file is not None:
        jfr_file.unlink()
        env["SAFEBUNNY_BENCH_JFR"] = str(jfr_file)
    proc = subprocess.Popen(cmd, env=env)
    cpu: dict[str, float] = {}
    stop = threading.Event()
    sampler = threading.Thread(target=_cpu_sampler, args=(proc.pid, stop, cpu), daemon=True)
    sampler.start()
    code = proc.wait()
    stop.set()
    sampler.join(5)
    cpu["broker (beam.smp)"] = cpu.get("broker (beam.smp)", 0.0) - sum(broker_before.values())
    print(f"\n== {args.only!r}: {time.time() - started:.0f} s wall; CPU seconds per role (2 cores):")
    for role, secs in sorted(cpu.items(), key=lambda kv: -kv[1]):
        print(f"   {secs:7.1f}  {role}")
    _print_summary(summarize_raw(raw.read_text().splitlines(), args.top), f"at {args.rate}/s (non-idle)")
    print(f"\nraw stacks: {raw}")
    if jfr_file is not None:
        if not jfr_file.exists():
            print(f"\nno Flight Recording at {jfr_file} (the JVM did not write it at exit)")
        else:
            jfr_bin = shutil.which("jfr") or "jfr"
            text = subprocess.run([jfr_bin, "print", "--events", "jdk.ExecutionSample", str(jfr_file)],
                                  capture_output=True, text=True, check=False).stdout
            print("\n== driver JVM (Java Flight Recorder execution samples, by thread group)")
            _print_summary(summarize_jfr(text, args.top), "(JFR, about every 20 ms per running thread)")
            print(f"\nrecording: {jfr_file}")
    return code


if __name__ == "__main__":
    sys.exit(main())
