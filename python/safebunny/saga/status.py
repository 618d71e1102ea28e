"""What ``saga.status()`` reports per step, read from durable places only, so every process agrees:
broker depths (AMQP passive declares), unacked messages (the management API, when it answers), the
step's counters (its :class:`~safebunny.saga.reports.ReportStore`) and its breaker (the pause file)."""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict, dataclass
from typing import Any

from safebunny.amqp.management import queue_counts
from safebunny.saga import topology
from safebunny.saga.config import SagaShape
from safebunny.saga.leases import LeaseStore, age, live
from safebunny.saga.parked import read_parked
from safebunny.saga.reports import COUNTERS, StepCounters
from safebunny.storage.lease import Lease
from safebunny.storage.pause import paused_until

__all__ = ["StepStatus", "combined", "ShardStatus", "unrouted_depth"]


@dataclass(frozen=True)
class StepStatus:
    """One step's state (``saga.status()``); ``None`` where the broker did not answer for a queue."""

    node: str
    type: str
    query: str
    backlog: int | None
    retrying: int | None
    poisoned: int
    batches: int
    received: int
    processed: int
    duplicates: int
    failed: int
    retried: int
    parked: int
    input_rate: float | None
    last_batch: str | None
    breaker: str
    #: delivered, not yet acknowledged (the management API); None with ``note`` saying why
    unacked: int | None = None
    note: str | None = None

    to_dict = asdict


def status_fields(saga: SagaShape, poison: bool = True) -> list[tuple[dict[str, Any], StepCounters]]:
    """Per step of ``saga``: a dict of ``StepStatus`` fields, and the counters they come from (its report files
    read once); ``poison=False`` leaves ``poisoned`` at None instead of reading each poison queue (a stream read,
    about half a second per step)."""
    config, layout = saga.config, saga.config.layout
    topo = topology.plan(saga)
    depth = topology.depths(saga, [q.name for q in topo.queues])
    queues_of = {s.label: [q.name for q in topo.queues if q.role == "consumer" and q.step == s.label]
                 for s in saga.steps}
    consumers = [name for names in queues_of.values() for name in names]
    counts, note = queue_counts(config.uri, consumers, config.password, config.settings.management_url)
    out = []
    for s in saga.steps:
        queues = queues_of[s.label]  # one, or one per shard: a step's row sums its shards
        backlogs = [depth.get(q) for q in queues]
        retry_depths = [depth.get(q.name) for q in topo.queues if q.role == "retry" and q.step == s.label]
        parked = depth.get(topology.poison_queue_name(config, s.node, s.consumes)) is not None
        c = combined([layout.reports(unit.unit_label).counters() for unit in s.units()])
        until = paused_until(layout.pause_file(s.node, s.consumes))
        unacked = (None if counts is None or any(q not in counts for q in queues)
                   else sum(counts[q].unacked for q in queues))
        out.append(({
            "node": s.node, "type": s.consumes, "query": ", ".join(f"{config.name}.{u.unit_label}" for u in s.units()),
            "backlog": None if any(b is None for b in backlogs) else sum(b[0] for b in backlogs),
            "retrying": None if any(d is None for d in retry_depths) else sum(d[0] for d in retry_depths),
            "poisoned": None if not poison else len(read_parked(config, s.node, s.consumes)) if parked else 0,
            **{name: c.totals[name] for name in COUNTERS}, "input_rate": c.rate, "last_batch": c.last_batch,
            "breaker": "closed" if until is None else
            f"open until {dt.datetime.fromtimestamp(until, dt.timezone.utc).isoformat(timespec='seconds')}",
            "unacked": unacked, "note": note}, c))
    return out


def combined(counters: list[StepCounters]) -> StepCounters:
    """The counters of a step's shards as one (sums; the latest last batch; rates added; each shard's last batch:
    messages added, the longest)."""
    if len(counters) == 1:
        return counters[0]
    rates = [c.rate for c in counters if c.rate is not None]
    last = max(counters, key=lambda c: c.last_batch or "")
    lasts = [c for c in counters if c.last_received is not None]
    return StepCounters(counters[0].step.split(".shard.")[0],
                        {name: sum(c.totals[name] for c in counters) for name in COUNTERS},
                        sum(rates) if rates else None, last.last_batch, last.last_batch_id, last.last_driver,
                        sum(c.last_received or 0 for c in lasts) if lasts else None,
                        max(c.last_seconds or 0.0 for c in lasts) if lasts else None)


@dataclass(frozen=True)
class ShardStatus:
    """One shard of a sharded step (``saga.shards()``); each field: docs/sagas.md, "Who holds what" (``holder``
    from :mod:`safebunny.saga.leases`)."""

    step: str
    shard: int
    queue: str
    backlog: int | None
    held: bool | None
    last_driver: str | None
    last_batch: str | None
    idle_seconds: float | None
    holder: str | None = None
    lease_age_seconds: float | None = None

    to_dict = asdict


def shard_status(saga: SagaShape, now: dt.datetime | None = None) -> list[ShardStatus]:
    """One :class:`ShardStatus` per shard of every sharded step (none when no step is sharded)."""
    units = [u for u in saga.units() if u.shard is not None]
    queues = {u.unit_label: topology.consumer_queue(saga.config, u.node, u.consumes, u.shard) for u in units}
    depth = topology.depths(saga, list(queues.values())) if units else {}
    now = now or dt.datetime.now(dt.timezone.utc)
    store = LeaseStore(saga.config.layout.leases) if units else None
    leases = {lease.holder: lease for lease in store.read_all()} if store else {}
    alive = live(leases.values(), now, path_of=store.path) if store else []
    out = []
    for u in units:
        found = depth.get(queues[u.unit_label])
        c = saga.config.layout.reports(u.unit_label).counters()
        idle = None if c.last_batch is None else (now - dt.datetime.fromisoformat(c.last_batch)).total_seconds()
        # a single-active-consumer queue counts its active consumer only: 1 when a driver holds the shard
        out.append(ShardStatus(u.label, u.shard, queues[u.unit_label], None if found is None else found[0],
                               None if found is None else found[1] > 0, c.last_driver, c.last_batch,
                               None if idle is None else round(idle, 1), *_holder(u.unit_label, alive, leases,
                                                                                   c.last_driver, now)))
    return out


def _holder(label: str, alive: list[Lease], leases: dict[str, Lease], last_driver: str | None,
            now: dt.datetime) -> tuple[str | None, float | None]:
    """(the live driver that last ran a batch with messages on shard ``label``, its lease's age), else (None, the
    age of the last batch's driver's lease, if it has one)."""
    claims = [(lease.payload["holding"][label], lease) for lease in alive if label in lease.payload["holding"]]
    if claims:
        lease = max(claims, key=lambda c: c[0])[1]
        return lease.holder, round(age(lease, now), 1)
    lease = leases.get(last_driver or "")
    return None, None if lease is None else round(age(lease, now), 1)


def unrouted_depth(saga: SagaShape) -> int | None:
    """How many messages the stream ``<saga>.unrouted`` holds: types sent to the saga's exchange that no step
    consumes (kept for ``unrouted_max_age``); None when it is not declared."""
    name = topology.unrouted_name(saga.config)
    found = topology.depths(saga, [name]).get(name)
    return None if found is None else int(found[0])

