"""The targets of tables by name on Delta Spark and of a saga's first drain, each with its ratio and verdict, read
from the results ``make bench-delta`` wrote in this run (``bench/results``).

    .venv-delta/bin/python -m bench.by_name_targets [--results DIR]

A result missing (its bench failed or was not run) reads "not judged"; a figure is never filled in.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from bench.report import verdict

__all__ = ["main", "lines"]

RESULTS = Path(__file__).resolve().parent / "results"


def _load(folder: Path, name: str) -> dict[str, Any] | None:
    path = folder / name
    return json.loads(path.read_text()) if path.exists() else None


def _line(label: str, value: float | None, target: str, met: bool | None, when: Any = None) -> str:
    shown = "–" if value is None else f"{value:.3f}x"
    return f"{label}: {shown} (target {target}): {verdict(met)}" + ("" if when is None else f" [{when}]")


def lines(folder: Path) -> list[str]:
    """One line per target, in the issue's order."""
    out = []
    step = _load(folder, "step_by_name.json")
    value = None if step is None else step.get("median_ratio")
    out.append(_line("step with inbox and effect by name / raw stage loop, 10,000 per batch", value, ">= 0.5x",
                     None if value is None else value >= 0.5, step and step.get("when")))
    hop = _load(folder, "saga_latency_by_name.json")
    value = None if hop is None else hop.get("ratio")
    out.append(_line("saga hop by name / plain Spark hop, p50", value, "<= 2x",
                     None if value is None else value <= 2.0))
    drain = _load(folder, "saga_drain_by_name.json")
    case = next((c for c in (drain or {}).get("cases", []) if c["orders"] == 100_000), None)
    value = None if case is None else case["median_ratio"]
    out.append(_line("2-step saga by name, drain of 100,000 orders / raw stage loop per hop", value, ">= 0.3x",
                     None if value is None else value >= 0.3, drain and drain.get("when")))
    shards = _load(folder, "shards_by_name.json")
    out.append("four shards on one table by name: " + ("– (not judged)" if shards is None else
               f"{shards['replans_per_batch']} replans per batch ({shards['replans']} in {shards['batches']} batches, "
               f"at most {shards['max_replans_in_a_batch']} in one), failed for attempts: {shards['error'] or 'none'}"
               f" (target: counted, none failing): {verdict(shards['met'])} [{shards['when']}]"))
    first = _load(folder, "first_drain.json")
    value = None if first is None else first.get("median_ratio")
    out.append(_line(f"default path, first drain of {first['orders'] if first else 20_000:,} orders in a fresh "
                     "process / raw stage loop per hop", value, ">= 0.4x", None if value is None else value >= 0.4,
                     first and first.get("when")))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    print(f"targets of tables by name and of the first drain (load average now {os.getloadavg()}):")
    for line in lines(args.results):
        print("  " + line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
