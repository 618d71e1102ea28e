"""What ``saga.status()`` reports per step, read from durable places only, so every process agrees:
broker depths and consumers (AMQP passive declares), unacked messages and the oldest message's age (the
management API, when it answers), the step's counters (its :class:`~safebunny.saga.run.reports.ReportStore`) and
its breaker (the pause file); and from those, in words, the step's state (:func:`step_health`, one pure
function for ``status()``, ``safebunny status``, ``/status.json`` and the page) and what is wrong with the
saga as a whole (:func:`saga_problems`)."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from safebunny.amqp.management import queue_counts
from safebunny.errors import SafeBunnyError
from safebunny.saga.define import topology
from safebunny.saga.define.config import SagaShape
from safebunny.saga.look.parked import read_parked
from safebunny.saga.run.leases import LeaseStore, age, live
from safebunny.saga.run.reports import COUNTERS, ReportStore, StepCounters, summary
from safebunny.storage.lease import Lease
from safebunny.storage.pause import paused_until
from safebunny.uri import redact

__all__ = ["StepStatus", "combined", "ShardStatus", "unrouted_depth", "STEP_STATES", "step_health", "saga_problems",
           "has_state", "oldest_waiting"]

#: a step's states, worst first: each is a word on the page, in ``status()`` and in ``safebunny status``
STEP_STATES = ("not declared", "paused", "not consumed", "failing", "running", "idle")
#: the states that are not as a step should be: the page's banner lists the steps in them
ALARMING = ("not declared", "paused", "not consumed", "failing")
#: failures or parkings this recent make a step "failing"
FAILING_WINDOW_S = 600.0


def _ago(seconds: float) -> str:
    seconds = max(0.0, seconds)
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min" if seconds < 7200 else \
        f"{seconds / 3600:.1f} h"


def step_health(backlog: int | None, consumers: int | None, paused_until_s: float | None, now_s: float,
                recent_failed: int = 0, recent_parked: int = 0, oldest_age_s: float | None = None,
                age_unknown: str | None = None) -> tuple[str, str]:
    """A step's state (one of :data:`STEP_STATES`) and what it means, in words, from what ``status()`` reads
    (pure). ``backlog``/``consumers``: its queue's ready messages and consumers (None: not declared);
    ``paused_until_s``: the end of its breaker's pause (epoch seconds, None: closed); ``recent_failed`` and
    ``recent_parked``: its batches' failures and parkings in the last :data:`FAILING_WINDOW_S`; ``oldest_age_s``:
    how long its queue's head message has waited, or None with ``age_unknown`` saying why."""
    if backlog is None:
        return "not declared", ("its queue is not declared on the broker: declare the saga "
                                "(saga.declare() or 'safebunny topology declare <saga>')")
    waiting = f"{backlog} message(s) waiting"
    if paused_until_s is not None:
        until = dt.datetime.fromtimestamp(paused_until_s, dt.timezone.utc).strftime("%H:%M:%S UTC")
        return "paused", (f"breaker open until {until} ({_ago(paused_until_s - now_s)} from now), set by "
                          f"saga.pause(); {waiting}; it resumes by itself then, or at saga.resume(node, type)")
    if backlog and not consumers:
        age = (f"the oldest has waited {_ago(oldest_age_s)}" if oldest_age_s is not None
               else f"the oldest's age unknown ({age_unknown or 'the broker does not say'})")
        return "not consumed", (f"{waiting} and no consumer: no query of this step runs (saga.run or "
                                f"'safebunny run'); {age}")
    if recent_failed or recent_parked:
        return "failing", (f"{recent_failed} failed, {recent_parked} parked in the last "
                           f"{FAILING_WINDOW_S / 60:.0f} min (see the poison list and the reasons)")
    if consumers:
        return "running", f"a query consumes its queue ({consumers} consumer(s)); {waiting}"
    return "idle", "nothing waiting and no query consuming: nothing to do"


def saga_problems(name: str, backlogs: list[int | None], has_state: bool, root: str) -> list[str]:
    """What is wrong with the saga as a whole, as ``safebunny status`` and the page both say it (pure): its
    queues not declared (every step's ``backlog`` None), or no state under its ``root`` (``has_state`` False)."""
    problems = []
    if backlogs and all(b is None for b in backlogs):
        problems.append(f"saga {name!r} is not declared on this broker: none of its step queues exists. Check "
                        "the saga's name and --uri, or declare it: saga.declare() or 'safebunny topology "
                        "declare <saga>'.")
    if not has_state:
        problems.append(f"no state under the saga's root {root}: no step of saga {name!r} has run and nothing was "
                        "started there. Check the root the running job gives (Saga(name, uri, root)).")
    return problems


def oldest_waiting(saga: SagaShape) -> dict[str, dt.datetime]:
    """Per step, since when the oldest running instance's next message waits in its queue (the saga's instances,
    :mod:`safebunny.saga.look.instances`: read without the broker's help, so without the management API)."""
    from safebunny.saga.look.instances import instances_table, waiting_since

    return waiting_since(instances_table(saga).to_pylist())


def has_state(saga: SagaShape) -> bool:
    """Whether anything was ever written under the saga's root: a step's counters, an inbox, started records."""
    from safebunny.storage.location import resolve_location

    layout = saga.config.layout
    if any(ReportStore(layout.root, u.unit_label).read() is not None for u in saga.units()):
        return True
    for path in (layout.inbox, layout.started):
        filesystem, where = resolve_location(path, "root")
        if filesystem.get_file_info(where).type.name != "NotFound":
            return True
    return False


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
    #: consumers of the step's queue(s) (passive declare): 0 when no query of the step runs
    consumers: int | None = None
    #: one of :data:`STEP_STATES` (:func:`step_health`), and what it means in words
    state: str = "idle"
    state_detail: str = ""

    to_dict = asdict


def status_fields(saga: SagaShape, poison: bool = True, waiting: Callable[[], Mapping[str, dt.datetime]] | None = None
                  ) -> list[tuple[dict[str, Any], StepCounters]]:
    """Per step of ``saga``: a dict of ``StepStatus`` fields, and the counters they come from (its report files
    read once); ``poison=False`` leaves ``poisoned`` at None instead of reading each poison queue (a stream read,
    about half a second per step). The oldest message's age of a step nobody consumes: the management API's,
    else how long the oldest instance waits there (``waiting()``: step -> since when, default
    :func:`oldest_waiting`, read only then)."""
    config, layout = saga.config, saga.config.layout
    topo = topology.plan(saga)
    depth = topology.depths(saga, [q.name for q in topo.queues])
    queues_of = {s.label: [q.name for q in topo.queues if q.role == "consumer" and q.step == s.label]
                 for s in saga.steps}
    consumers = [name for names in queues_of.values() for name in names]
    counts, note = queue_counts(config.connection.uri, consumers, config.connection.password,
                                config.settings.management_url)
    now, since = time.time(), None
    unknown = "no instance the saga started waits there, and the management API does not say"
    out = []
    for s in saga.steps:
        queues = queues_of[s.label]  # one, or one per shard: a step's row sums its shards
        backlogs = [depth.get(q) for q in queues]
        retry_depths = [depth.get(q.name) for q in topo.queues if q.role == "retry" and q.step == s.label]
        parked = depth.get(topology.poison_queue_name(config, s.node, s.consumes)) is not None
        records = [ReportStore(layout.root, unit.unit_label).read() for unit in s.units()]
        c = combined([summary(unit.unit_label, r) for unit, r in zip(s.units(), records, strict=True)])
        until = paused_until(layout.pause_file(s.node, s.consumes))
        unacked = (None if counts is None or any(q not in counts for q in queues)
                   else sum(counts[q].unacked for q in queues))
        backlog = None if any(b is None for b in backlogs) else sum(b[0] for b in backlogs)
        consumer_count = None if backlog is None else sum(b[1] for b in backlogs if b)
        heads = [counts[q].head_timestamp for q in queues if counts and q in counts and counts[q].head_timestamp]
        age = now - min(heads) if heads else None
        if age is None and backlog and not consumer_count and until is None:
            if since is None:
                try:
                    since = dict(waiting() if waiting else oldest_waiting(saga))
                except (SafeBunnyError, OSError) as exc:  # the age is then unknown, and says why
                    since, unknown = {}, redact(f"the saga's instances could not be read: {type(exc).__name__}: {exc}")
            age = now - since[s.label].timestamp() if s.label in since else None
        recent = _recent(records, now)
        state = step_health(backlog, consumer_count, until, now, recent["failed"], recent["parked"], age, unknown)
        out.append(({
            "node": s.node, "type": s.consumes, "query": ", ".join(f"{config.name}.{u.unit_label}" for u in s.units()),
            "backlog": backlog,
            "retrying": None if any(d is None for d in retry_depths) else sum(d[0] for d in retry_depths),
            "poisoned": None if not poison else len(read_parked(config, s.node, s.consumes)) if parked else 0,
            **{name: c.totals[name] for name in COUNTERS}, "input_rate": c.rate, "last_batch": c.last_batch,
            "breaker": "closed" if until is None else
            f"open until {dt.datetime.fromtimestamp(until, dt.timezone.utc).isoformat(timespec='seconds')}",
            "unacked": unacked, "note": note, "consumers": consumer_count, "state": state[0],
            "state_detail": state[1]}, c))
    return out


def _recent(records: list[dict[str, Any] | None], now: float) -> dict[str, int]:
    """Failed and parked messages in the step's batch reports of the last :data:`FAILING_WINDOW_S`."""
    since = dt.datetime.fromtimestamp(now - FAILING_WINDOW_S, dt.timezone.utc)
    reports = [r for record in records for r in (record or {}).get("reports") or []
               if dt.datetime.fromisoformat(r["finished_at"]) > since]
    return {name: sum(int(r.get(name) or 0) for r in reports) for name in ("failed", "parked")}


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
    from :mod:`safebunny.saga.run.leases`)."""

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
        c = ReportStore(saga.config.layout.root, u.unit_label).counters()
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

