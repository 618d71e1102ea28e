"""The demo's self-checking summary: counts from the Delta tables and the poison queues, checked
against what was published (pure functions; :mod:`safebunny.demo.run` gathers the inputs)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from safebunny.demo.orders import Plan
from safebunny.ids import correlation_id_for

__all__ = ["summarise"]


@dataclass
class Summary:
    """What the demo prints at the end, and the checks that failed (empty when all passed)."""

    counts: dict[str, int]
    failures: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when every check passed."""
        return not self.failures

    def lines(self) -> list[str]:
        """The summary as printable lines."""
        width = max(len(k) for k in self.counts)
        out = [f"  {k.ljust(width)}  {v:>7,}" for k, v in self.counts.items()]
        out.append("checks: " + ("all passed" if self.ok else f"{len(self.failures)} FAILED"))
        out.extend(f"  FAILED: {f}" for f in self.failures)
        return out


def _show(ids: Iterable[str], limit: int = 5) -> str:
    ids = sorted(ids)
    more = f" and {len(ids) - limit} more" if len(ids) > limit else ""
    return ", ".join(ids[:limit]) + more


def summarise(plan: Plan, reservations: list[Mapping[str, Any]], payments: list[Mapping[str, Any]],
              shipments: list[Mapping[str, Any]], poisoned_correlation_ids: Iterable[str],
              duplicates_dropped: int | None, left_in_queues: Mapping[str, int]) -> Summary:
    """Count and check the demo's outcome.

    ``reservations`` rows have ``orderId`` and ``qty`` (negative for a release), ``payments``
    ``orderId`` and ``status`` (``charged``/``declined``), ``shipments`` ``orderId``;
    ``poisoned_correlation_ids`` are the correlation ids of parked messages; ``left_in_queues`` maps
    every step, retry and poison-free queue name to its depth after the drain."""
    by_corr = {correlation_id_for(o["orderId"]): o["orderId"] for o in plan.orders}
    by_corr.update({correlation_id_for(oid): oid for oid, _ in plan.malformed})
    poisoned = {by_corr.get(c, f"unknown correlation id {c}") for c in poisoned_correlation_ids}
    shipped_counts = Counter(r["orderId"] for r in shipments)
    charged_counts = Counter(r["orderId"] for r in payments if r["status"] == "charged")
    declined_paid = {r["orderId"] for r in payments if r["status"] == "declined"}
    net: Counter[str] = Counter()  # each order's reserved stock: reservations minus releases
    for r in reservations:
        net[r["orderId"]] += int(r["qty"])
    reserves = Counter(r["orderId"] for r in reservations if int(r["qty"]) > 0)
    shipped, compensated = set(shipped_counts), {r["orderId"] for r in reservations if int(r["qty"]) <= 0}
    counts = {
        "orders in": plan.total,
        "messages published": plan.total + len(plan.duplicates),
        "duplicates injected": len(plan.duplicates),
        "duplicates dropped": -1 if duplicates_dropped is None else duplicates_dropped,
        "shipped": len(shipped),
        "compensated": len(compensated),
        "poisoned": len(poisoned),
    }
    failures = []
    if len(shipped) + len(compensated) + len(poisoned) != plan.total:
        failures.append(f"shipped + compensated + poisoned = {len(shipped) + len(compensated) + len(poisoned)}, "
                        f"not the {plan.total} orders in")
    well_formed = {o["orderId"] for o in plan.orders}
    expected = {"shipped": (shipped, well_formed - plan.declined), "compensated": (compensated, set(plan.declined)),
                "poisoned": (poisoned, {oid for oid, _ in plan.malformed}),
                "declined at payment": (declined_paid, set(plan.declined))}
    for name, (got, want) in expected.items():
        if got != want:
            failures.append(f"{name}: missing {_show(want - got) or 'none'}; unexpected {_show(got - want) or 'none'}")
    wrong = {"orders charged more than once": {k for k, v in charged_counts.items() if v > 1},
             "declined orders charged": charged_counts.keys() & plan.declined,
             "orders shipped twice": {k for k, v in shipped_counts.items() if v > 1},
             "stock reserved twice for": {k for k, v in reserves.items() if v > 1},
             "stock still reserved for compensated orders": {oid for oid in compensated if net[oid] != 0},
             "shipped without a reservation": {oid for oid in shipped if net[oid] <= 0}}
    failures += [f"{what} ({len(ids)}): {_show(ids)}" for what, ids in wrong.items() if ids]
    if duplicates_dropped is not None and plan.duplicates and duplicates_dropped < len(plan.duplicates):
        failures.append(f"only {duplicates_dropped} duplicates dropped of {len(plan.duplicates)} injected")
    waiting = {q: n for q, n in left_in_queues.items() if n}
    if waiting:
        failures.append(f"messages left after the drain: {waiting}")
    return Summary(counts, failures)
