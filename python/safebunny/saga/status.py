"""What ``saga.status()`` reports per step, read from durable places only, so every process agrees:
broker depths (AMQP passive declares), unacked messages (the management API, when it answers), the
step's counters (its :class:`~safebunny.saga.status_log.StatusLog`) and its breaker (the pause file)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from safebunny.amqp.management import queue_counts
from safebunny.saga import breaker, topology
from safebunny.saga.status_log import StatusLog

__all__ = ["status_fields"]


def status_fields(saga: Any, poison: bool = True) -> list[dict[str, Any]]:
    """One dict of ``StepStatus`` fields per step of ``saga``; ``poison=False`` leaves ``poisoned`` at None
    instead of reading each poison queue (a stream read, about half a second per step)."""
    topo = topology.plan(saga)
    depth = topology.depths(saga, [q.name for q in topo.queues])
    consumers = [topology.queue_name(saga, s.node, s.consumes) for s in saga.steps]
    counts, note = queue_counts(saga.uri, consumers, saga.password, getattr(saga, "management_url", None))
    out = []
    for s in saga.steps:
        queue = topology.queue_name(saga, s.node, s.consumes)
        backlog = depth.get(queue)
        retry_depths = [depth.get(q.name) for q in topo.queues if q.role == "retry" and q.step == s.label]
        parked = depth.get(topology.poison_queue_name(saga, s.node, s.consumes)) is not None
        c = StatusLog(saga.root, s.label).counters()
        until = breaker.paused_until(saga.pause_file(s.node, s.consumes))
        unacked = None if counts is None or queue not in counts else counts[queue].unacked
        out.append({
            "node": s.node, "type": s.consumes, "query": f"{saga.name}.{s.label}",
            "backlog": None if backlog is None else backlog[0],
            "retrying": None if any(d is None for d in retry_depths) else sum(d[0] for d in retry_depths),
            "poisoned": None if not poison else len(saga.poison_rows(s.node, s.consumes)) if parked else 0,
            "batches": c.batches, "received": c.received, "processed": c.processed, "duplicates": c.duplicates,
            "failed": c.failed, "retried": c.retried, "parked": c.parked, "input_rate": c.rate,
            "last_batch": c.last_batch,
            "breaker": "closed" if until is None else
            f"open until {dt.datetime.fromtimestamp(until, dt.timezone.utc).isoformat(timespec='seconds')}",
            "unacked": unacked, "note": note})
    return out
