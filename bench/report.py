"""The pure side of the benchmark: results, ratios to the raw ceilings, targets, and the table.

Nothing here talks to a broker or to Spark, so it is unit-tested (tests/unit/test_bench_report.py).
A case either has measured rates or a status saying why it has none; a missing number is never
filled in.
"""

from __future__ import annotations

import json
import os
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = [
    "CaseResult",
    "alternating_rounds",
    "Target",
    "broker_ceiling_target",
    "evaluate_targets",
    "format_markdown",
    "cpu_table",
    "mark_unmeasured",
    "MIN_BATCHES",
    "NOT_MEASURED",
    "format_text",
    "phase_table",
    "ratio",
    "ratio_line",
    "verdict",
    "results_to_json",
    "table_rows",
]

OK = "ok"
NOT_MEASURED = "not measured"
#: A Spark case needs at least this many measured batches (after the cold first one) for its rate to
#: tell a regression from noise; fewer, and it is reported as not measured.
MIN_BATCHES = 5
#: issue 50, item 3: one stream-protocol partition against raw rstream consume, same run
STREAM_ONE_PARTITION_TARGET = 0.85


def mark_unmeasured(results: list[CaseResult], min_batches: int = MIN_BATCHES) -> list[CaseResult]:
    """Mark every connector case whose measured span holds fewer than ``min_batches`` batches as not
    measured (its rate is dropped from ratios and targets); returns the marked cases."""
    marked = []
    for r in results:
        if r.group != "connector" or r.status != OK or not r.batch_ms:
            continue
        measured = max(0, int(r.params.get("batches", len(r.batch_ms))) - 1)  # the first batch is the cold start
        if measured < min_batches:
            r.status = NOT_MEASURED
            r.reason = (f"only {measured} measured batch(es) (< {min_batches}): too few to tell a regression from "
                        "noise; run with more messages (make bench-full)")
            marked.append(r)
    return marked


@dataclass
class CaseResult:
    """One benchmark case: a raw-client ceiling or a connector case, over one or more runs."""

    name: str
    group: str  # "raw" or "connector"
    kind: str  # publish | consume | stage | source | sink | latency
    queue_type: str  # classic | quorum | stream
    messages: int = 0
    rates: list[float] = field(default_factory=list)  # msg/s, one per run
    ceiling: str | None = None  # name of the matching raw case
    batch_ms: list[float] = field(default_factory=list)  # durations of non-empty micro-batches
    e2e_ms: list[float] = field(default_factory=list)  # end-to-end latencies of messages
    memory_mb: dict[str, float] = field(default_factory=dict)  # peak RSS per process role
    cpu_s: dict[str, float] = field(default_factory=dict)  # CPU seconds per process role, summed over runs
    cpu_messages: int = 0  # the messages those CPU seconds moved (summed over runs)
    status: str = OK  # ok | not available | failed
    reason: str = ""
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def rate(self) -> float | None:
        """Median msg/s over the runs, or None when nothing was measured."""
        return statistics.median(self.rates) if self.rates and self.status == OK else None


@dataclass
class Target:
    """A goal from the issue, reported (never asserted): met is None when it could not be judged."""

    name: str
    goal: str
    value: str
    met: bool | None
    note: str = ""


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def ratio(case: CaseResult, by_name: dict[str, CaseResult]) -> float | None:
    """The case's median rate over its ceiling's median rate, when both exist."""
    if case.ceiling is None or case.rate is None:
        return None
    ceiling = by_name.get(case.ceiling)
    if ceiling is None or not ceiling.rate:
        return None
    return case.rate / ceiling.rate


def verdict(met: bool | None) -> str:
    """How a target reads in every bench's output: met, not met, or not judged (no number to judge)."""
    return "not judged" if met is None else ("met" if met else "not met")


def ratio_line(label: str, value: float | None, floor: float | None, digits: int = 3) -> str:
    """One printed line: a measured ratio with its target beside it and the verdict, e.g.
    ``step / raw stage loop: 0.951x (target >= 1.0x): not met``."""
    shown = "–" if value is None else f"{value:.{digits}f}x"
    if floor is None:
        return f"{label}: {shown} (no target)"
    return f"{label}: {shown} (target >= {floor}x): {verdict(None if value is None else value >= floor)}"


def alternating_rounds(count: int, cases: Sequence[str], measure: Callable[[str, int], Any],
                       summary: Callable[[dict[str, Any]], tuple[dict[str, Any], str]], title: str = "round",
                       load: Callable[[], float] = lambda: os.getloadavg()[0]) -> list[dict[str, Any]]:
    """``count`` rounds, each measuring every one of ``cases`` (``measure(case, index)``, ``index`` the round's), the
    case that runs first rotating by one a round, so that a drift of the machine's load favours none. ``summary(got)``
    (case -> what ``measure`` returned): the round's record and its line. Each record gets the round's ``order`` and
    ``load_1m`` (the load average as the round began); each line is printed as its round ends, ``<title> N
    (<order>): <line>; load L``. The records, in the order run."""
    rounds = []
    for index in range(count):
        load_1m = round(load(), 2)
        shift = index % len(cases)
        order = [*cases[shift:], *cases[:shift]]
        got = {case: measure(case, index) for case in order}
        record, line = summary(got)
        rounds.append({"order": order, **record, "load_1m": load_1m})
        print(f"{title} {index + 1} ({', '.join(order)}): {line}; load {load_1m}", flush=True)
    return rounds


def _fmt_num(value: float | None, digits: int = 0) -> str:
    if value is None:
        return "–"
    return f"{value:,.{digits}f}"


def table_rows(results: list[CaseResult]) -> list[list[str]]:
    """Rows of the results table, header first."""
    by_name = {r.name: r for r in results}
    rows = [["case", "queue", "msg/s", "× ceiling", "ceiling", "batch p50/p99 ms", "e2e p50/p99 ms",
             "peak MB driver/reader/workers"]]
    for r in results:
        if r.status != OK:
            rows.append([r.name, r.queue_type, r.status, "–", r.ceiling or "–", "–", "–", f"({r.reason})"])
            continue
        rt = ratio(r, by_name)
        batch = "–" if not r.batch_ms else (
            f"{_fmt_num(_percentile(r.batch_ms, 0.5))} / {_fmt_num(_percentile(r.batch_ms, 0.99))}")
        e2e = "–" if not r.e2e_ms else (
            f"{_fmt_num(_percentile(r.e2e_ms, 0.5), 1)} / {_fmt_num(_percentile(r.e2e_ms, 0.99), 1)}")
        mem = "–" if not r.memory_mb else " / ".join(
            _fmt_num(r.memory_mb.get(k)) for k in ("driver_jvm", "reader", "workers"))
        rate = _fmt_num(r.rate) if r.kind != "latency" else "–"
        rows.append([r.name, r.queue_type, rate, "–" if rt is None else f"{rt:.2f}",
                     r.ceiling or "–", batch, e2e, mem])
    return rows


CPU_ROLES = (("harness", "harness"), ("driver_jvm", "driver JVM"), ("reader", "reader"), ("workers", "workers"),
             ("other_python", "other Python"), ("broker", "broker"))


def cpu_table(results: list[CaseResult]) -> list[list[str]]:
    """Rows (header first): CPU microseconds per message of each process role over the measured spans, and the
    cores all of them kept busy (CPU per message times the rate: on 2 cores, near 2 means the machine is the
    limit, whatever the code)."""
    rows = [["case"] + [title for _, title in CPU_ROLES] + ["total without broker", "cores busy (all)"]]
    for r in results:
        if r.status != OK or not r.cpu_s or not r.cpu_messages:
            continue
        per = {k: v * 1e6 / r.cpu_messages for k, v in r.cpu_s.items()}
        total = sum(v for k, v in per.items() if k != "broker")
        cores = None if r.rate is None or r.kind == "latency" else sum(per.values()) * r.rate / 1e6
        rows.append([r.name] + [_fmt_num(per.get(k)) if k in per else "–" for k, _ in CPU_ROLES]
                    + [_fmt_num(total), _fmt_num(cores, 2)])
    return rows


def phase_table(results: list[CaseResult], top: int = 5) -> list[list[str]]:
    """Rows (header first) of the largest Spark phases per connector case that reported them."""
    rows = [["case", "batches", "first batch (cold start)", "batch p50 ms", "largest phases, p50 ms"]]
    for r in results:
        ph = r.params.get("phases_ms_p50")
        if r.status != OK or not ph:
            continue
        largest = sorted(ph.items(), key=lambda kv: -kv[1])
        largest = [(k, v) for k, v in largest if k != "triggerExecution"][:top]
        first = r.params.get("first_batch")
        cold = f"{first['rows']:,} rows in {first['ms']:,.0f} ms" if first else "–"
        rows.append([r.name, str(r.params.get("batches", len(r.batch_ms))), cold,
                     _fmt_num(_percentile(r.batch_ms, 0.5)),
                     " · ".join(f"{k} {v:,.0f}" for k, v in largest)])
    return rows


def evaluate_targets(results: list[CaseResult]) -> list[Target]:
    """Judge the issue's targets from the results; a target without its numbers is 'not judged'."""
    by_name = {r.name: r for r in results}
    targets: list[Target] = []

    def ratio_target(name: str, goal: str, cases: list[CaseResult], floor: float) -> None:
        judged = [(c, ratio(c, by_name)) for c in cases]
        judged = [(c, x) for c, x in judged if x is not None]
        if not judged:
            targets.append(Target(name, goal, "–", None, "no measured case"))
            return
        value = ", ".join(f"{c.name}: {x:.2f}×" for c, x in judged)
        targets.append(Target(name, goal, value, all(x >= floor for _, x in judged)))

    ratio_target("source vs pika consume", "≥ 0.8× the pika consume ceiling at batches ≥ 10k",
                 [r for r in results if r.kind == "source" and r.queue_type != "stream"
                  and r.params.get("maxMessagesPerTrigger", 0) >= 10_000], 0.8)
    targets.append(broker_ceiling_target(results))
    ratio_target("sink vs pika confirm window", "≥ 0.8× the pika confirm-window ceiling",
                 [r for r in results if r.kind == "sink"], 0.8)
    ratio_target("stage vs raw stage loop", "≥ 0.5× the raw stage loop",
                 [r for r in results if r.kind == "stage"], 0.5)

    streams = {r.params.get("partitions"): r for r in results
               if r.kind == "source" and r.queue_type == "stream" and r.rate is not None}
    if streams:
        best = max(streams.values(), key=lambda r: r.rate or 0.0)
        targets.append(Target("stream source", "≥ 50,000 msg/s through the stream protocol",
                              f"{best.name}: {best.rate:,.0f} msg/s", (best.rate or 0.0) >= 50_000))
    else:
        targets.append(Target("stream source", "≥ 50,000 msg/s through the stream protocol", "–", None,
                              "no measured case"))
    one = streams.get(1)
    one_x = None if one is None else ratio(one, by_name)
    goal = f"one partition ≥ {STREAM_ONE_PARTITION_TARGET}× raw rstream consume (issue 50, item 3)"
    if one is None or one_x is None:
        targets.append(Target("stream source, 1 partition", goal, "–", None, "no measured pair"))
    else:
        targets.append(Target("stream source, 1 partition", goal, f"{one.name}: {one_x:.2f}×",
                              one_x >= STREAM_ONE_PARTITION_TARGET))
    if 1 in streams and 2 in streams:
        scale = (streams[2].rate or 0.0) / (streams[1].rate or 1.0)
        targets.append(Target("stream partitions", "two partitions ≥ 1.7× one", f"{scale:.2f}×", scale >= 1.7))
    else:
        targets.append(Target("stream partitions", "two partitions ≥ 1.7× one", "–", None, "no measured pair"))

    sweep = sorted((r.params["maxMessagesPerTrigger"], r.memory_mb["reader"]) for r in results
                   if r.params.get("sweep") and r.rate is not None and "reader" in r.memory_mb)
    if len(sweep) >= 2:
        (lo_n, lo_mb), (hi_n, hi_mb) = sweep[0], sweep[-1]
        per_msg = (hi_mb - lo_mb) * 1024 * 1024 / (hi_n - lo_n)
        depth = min(r.params.get("depth", r.messages) for r in results if r.params.get("sweep"))
        targets.append(Target(
            "reader memory", "reader memory bounded by maxMessagesPerTrigger",
            f"{lo_mb:.0f} MB at {lo_n:,} → {hi_mb:.0f} MB at {hi_n:,} ({per_msg:,.0f} B per message of batch; "
            f"queues at least {depth:,} deep)",
            per_msg <= 4096,
            "on a queue deeper than every batch, bounded means growth ≤ 4 KiB per message of the batch limit"))
    else:
        targets.append(Target("reader memory", "reader memory bounded by maxMessagesPerTrigger", "–", None,
                              "needs the maxMessagesPerTrigger sweep with reader memory"))
    return targets


def broker_ceiling_target(results: list[CaseResult], floor: float = 0.8) -> Target:
    """The source's best classic/quorum rate against the broker's ceiling: the best of the raw pika consumers
    in processes of their own (cases with a ``consumers`` parameter) on the same queue type."""
    goal = f"the source's best ≥ {floor}× the best of 1/2/4 pika consumer processes (quorum)"
    ceilings = [r for r in results if r.group == "raw" and r.params.get("consumers") and r.rate is not None]
    sources = [r for r in results if r.kind == "source" and r.queue_type == "quorum" and r.rate is not None]
    if not ceilings or not sources:
        return Target("source vs the broker's ceiling", goal, "–", None,
                      "needs the multi-consumer ceiling and a measured quorum source case")
    top = max(ceilings, key=lambda r: r.rate or 0.0)
    best = max(sources, key=lambda r: r.rate or 0.0)
    x = (best.rate or 0.0) / (top.rate or 1.0)
    ordered = sorted(ceilings, key=lambda r: r.params["consumers"])
    each = ", ".join(f"{r.params['consumers']}: {r.rate:,.0f}" for r in ordered)
    return Target("source vs the broker's ceiling", goal,
                  f"{best.name}: {best.rate:,.0f} msg/s = {x:.2f}× {top.rate:,.0f} msg/s "
                  f"({top.params['consumers']} process(es); by processes {each})", x >= floor)


def _markdown_table(rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(rows[0]) + " |", "|" + "|".join(" --- " for _ in rows[0]) + "|"]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows[1:]]
    return "\n".join(lines)


def format_markdown(results: list[CaseResult], targets: list[Target], machine: dict[str, Any],
                    command: str, notes: list[str] | None = None) -> str:
    """The Markdown report: machine, table, targets, notes."""
    parts = [f"# safebunny benchmark ({machine.get('started', '?')})", "", f"Command: `{command}`", "",
             "## Machine", ""]
    parts += [f"- {k}: {v}" for k, v in machine.items()]
    parts += ["", "## Results", "", _markdown_table(table_rows(results)), "", "## Targets", ""]
    tgt = [["target", "goal", "measured", "met"]]
    for t in targets:
        met = "not judged" if t.met is None else ("yes" if t.met else "**no**")
        tgt.append([t.name, t.goal, t.value + (f" ({t.note})" if t.note else ""), met])
    parts += [_markdown_table(tgt), ""]
    phase_rows = phase_table(results)
    if len(phase_rows) > 1:
        parts += ["## Where a micro-batch spends its time", "",
                  "Spark's `durationMs` per phase, median over the non-empty batches of each connector case "
                  "(`latestOffset`: the reader takes and journals the batch; `addBatch`: the tasks read, transform "
                  "and write; `walCommit`/`commitOffsets`: the checkpoint).", "",
                  _markdown_table(phase_rows), ""]
    cpu_rows = cpu_table(results)
    if len(cpu_rows) > 1:
        parts += ["## CPU per message", "",
                  "CPU microseconds per message of each process over each case's measured span (psutil, sampled "
                  "every 0.25 s; the broker is shared, so its column includes other clients' load). The raw clients "
                  "run in the harness process. \"Cores busy\" is all of it times the case's rate: near the machine's "
                  "core count, the case is held by the CPU it shares, not by a wait.", "",
                  _markdown_table(cpu_rows), ""]
    if notes:
        parts += ["## Notes", ""] + [f"- {n}" for n in notes] + [""]
    return "\n".join(parts)


def format_text(results: list[CaseResult], targets: list[Target]) -> str:
    """A fixed-width table for the terminal."""
    rows = table_rows(results)
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    out = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) for row in rows]
    out.insert(1, "  ".join("-" * w for w in widths))
    out.append("")
    for t in targets:
        out.append(f"[{verdict(t.met)}] {t.name}: {t.goal} — {t.value}" + (f" ({t.note})" if t.note else ""))
    return "\n".join(out)


def results_to_json(results: list[CaseResult], targets: list[Target], machine: dict[str, Any],
                    command: str, notes: list[str] | None = None,
                    series: list[dict[str, Any]] | None = None) -> str:
    """Everything measured, as JSON (latency samples summarised, not dumped; ``series``, the
    throughput plot's data, kept so that the plot can be redrawn)."""
    by_name = {r.name: r for r in results}
    cases = []
    for r in results:
        d = asdict(r)
        d.pop("batch_ms")
        d.pop("e2e_ms")
        d["rate_median"] = r.rate
        d["ratio"] = ratio(r, by_name)
        d["batch_ms"] = {"n": len(r.batch_ms), "p50": _percentile(r.batch_ms, 0.5),
                         "p99": _percentile(r.batch_ms, 0.99)}
        d["e2e_ms"] = {"n": len(r.e2e_ms), "p50": _percentile(r.e2e_ms, 0.5), "p99": _percentile(r.e2e_ms, 0.99)}
        cases.append(d)
    doc = {"command": command, "machine": machine, "cases": cases, "targets": [asdict(t) for t in targets],
           "notes": notes or []}
    if series is not None:
        doc["series"] = series
    return json.dumps(doc, indent=2)
