"""Which drivers run a saga now by their leases, which shards each holds, and who should hold which.

The broker decides who holds a shard (single active consumer); leases decide only the balance. Each driver
rewrites ``<root>/drivers/_leases/<driver>.json`` (a :mod:`safebunny.storage.lease`) from a renewer thread;
from the live leases every driver computes the same assignment (:func:`assign`) and hands a shard on by
restarting its query for it (:func:`handovers`). Correctness never rests on a lease (docs/sagas.md,
``drivers/_leases/``). A driver lives by the one rule of every lease (:meth:`safebunny.storage.lease.Lease.live`,
with :data:`TTL_S`: the hosts' clocks must agree to within a few seconds of it); its lease is that record, its
holder the driver, its payload what :func:`mine` names.

The module is pure but for :class:`LeaseStore`, which reads and writes the files, and :class:`Balancer`, one
driver's side of balancing: :class:`RunningSaga <safebunny.saga.run.runner.RunningSaga>` of a saga with ``driver=``
calls :meth:`Balancer.tick` from its supervisor about once a second and restarts the query of each shard it gets
back; the lease is written only by :meth:`Balancer.renew`, from a renewer thread (:meth:`Balancer.start`) every
:data:`RENEW_S` seconds. This driver holds a shard when the shard's stored reports (:mod:`safebunny.saga.run.reports`)
name its own last batch with messages, finished after its query for the shard last (re)started and within
:data:`HOLD_S`. The rules: docs/sagas.md ("Balance between live drivers").
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
import zlib
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace

from safebunny.saga.define.config import SagaShape
from safebunny.saga.run.reports import ReportStore
from safebunny.storage.lease import Lease, Renewer, read_leases, write_lease
from safebunny.storage.location import resolve_location
from safebunny.storage.records import remove_record

__all__ = ["Balancer", "HOLD_S", "LeaseStore", "age", "assign", "handovers", "live", "mine", "TTL_S", "SETTLE_S"]

log = logging.getLogger("safebunny.saga")

#: how often a running driver rewrites its lease
RENEW_S = 5.0
#: a lease not renewed for this long is a driver gone (killed, its host lost): it gets no shards
TTL_S = 20.0
#: a driver's shard query counts as a standby only after running this long (its consumer has attached)
SETTLE_S = 10.0
#: a lease file's key for its holder, the driver's name
HOLDER = "driver"


def mine(driver: str, started: str, renewed: float, running: Mapping[str, str], holding: Mapping[str, str]) -> Lease:
    """This process's lease as driver ``driver``, renewed at ``renewed`` (epoch seconds). Its payload: ``started``,
    when the driver started; ``running``: shard label -> when its query (re)started; ``holding``: shard label -> the
    finish time of this driver's last batch with messages there since that start (ISO 8601, UTC)."""
    return Lease.mine(driver, {"started": started, "running": dict(running), "holding": dict(holding)}, renewed)


def _driver(lease: Lease) -> Lease:
    """A lease file as a driver's lease (a foreign one raises one of :data:`safebunny.storage.lease.DAMAGED`)."""
    p = lease.payload
    return replace(lease, renewed=float(lease.renewed),  # type: ignore[arg-type]
                   payload={"started": str(p["started"]), "running": dict(p.get("running") or {}),
                            "holding": dict(p.get("holding") or {})})


def age(lease: Lease, now: dt.datetime) -> float:
    """Seconds since ``lease`` was renewed."""
    return now.timestamp() - float(lease.renewed)  # type: ignore[arg-type]


def live(leases: Iterable[Lease], now: dt.datetime, ttl_s: float = TTL_S,
         path_of: Callable[[str], str] = lambda driver: "", me: str | None = None) -> list[Lease]:
    """The leases whose drivers live (:meth:`safebunny.storage.lease.Lease.live` at ``now``, with ``ttl_s``), by
    driver name. ``path_of``: a driver's lease file (:meth:`LeaseStore.path`), which its renewer registers; ``me``:
    the driver asking, which lives (it has just written its lease, before its renewer starts)."""
    return sorted((lease for lease in leases
                   if lease.holder == me or lease.live(ttl_s, now.timestamp(), path_of(lease.holder))),
                  key=lambda lease: lease.holder)


def assign(shards: Mapping[str, list[str]], drivers: Iterable[str]) -> dict[str, str]:
    """Shard label -> driver, the same in every process that sees the same drivers. ``shards``: each sharded
    step's shard labels in shard order. A step's shards go round the drivers (sorted by name), so each driver
    gets ``n // d`` or one more of every step; each step starts at its own place in the round (a hash of its
    name), so the drivers holding one more differ from step to step."""
    names = sorted(set(drivers))
    if not names:
        return {}
    out = {}
    for step, labels in shards.items():
        offset = zlib.crc32(step.encode("utf-8")) % len(names)
        for i, label in enumerate(labels):
            out[label] = names[(offset + i) % len(names)]
    return out


def handovers(me: str, held: Mapping[str, float], assignment: Mapping[str, str], leases: Iterable[Lease],
              now: dt.datetime, settle_s: float = SETTLE_S) -> dict[str, str]:
    """Shard label -> driver, for each shard ``me`` holds that the assignment gives to another live driver whose
    query for that shard has run for ``settle_s`` (so its consumer waits to take the shard over) and whose lease
    was renewed after ``me`` began holding the shard. ``held``: shard label -> the renewal of ``me``'s lease that
    first found it holding the shard (epoch seconds); ``leases``: the live ones.

    The last rule keeps a shard from a driver that died: the broker moved the shard to ``me`` because that
    driver's connection closed, after its last renewal, and its lease stays live for :data:`TTL_S` more. Handing
    the shard "back" would only restart ``me``'s query for nothing (the shard unheld meanwhile, its unacked
    messages redelivered); a live driver renews within :data:`RENEW_S` and gets the shard then."""
    standby = {lease.holder: lease for lease in leases}
    out = {}
    for label, since_held in held.items():
        target = assignment.get(label)
        lease = standby.get(target) if target is not None and target != me else None
        if lease is None or label not in lease.payload["running"]:
            continue
        if float(lease.renewed) <= since_held:  # type: ignore[arg-type]
            continue  # not renewed since me took the shard over: the target may be the driver that died
        if (now - dt.datetime.fromisoformat(lease.payload["running"][label])).total_seconds() >= settle_s:
            out[label] = target
    return out


class LeaseStore:
    """The lease files of one saga, ``<driver>.json`` in ``folder`` (``SagaLayout.leases``)."""

    def __init__(self, folder: str) -> None:
        self.filesystem, self.folder = resolve_location(folder, "root")

    def path(self, driver: str) -> str:
        return f"{self.folder}/{driver}.json"

    def write(self, lease: Lease) -> None:
        """Rewrite ``lease`` whole (readers see the old one or the new one)."""
        write_lease(self.filesystem, self.path(lease.holder), lease, HOLDER, durable=False)

    def read_all(self) -> list[Lease]:
        """Every lease on storage, live or not (a half-written or foreign file is skipped)."""
        return read_leases(self.filesystem, self.folder, HOLDER, _driver)

    def remove(self, driver: str) -> None:
        """Remove ``driver``'s lease (a driver stopping cleanly leaves no shards to be given to it)."""
        remove_record(self.filesystem, self.path(driver))


#: a batch older than this is no evidence that this driver still holds the shard
HOLD_S = 60.0
#: a shard handed over is not handed over again by this driver for this long (damps a shard going round while
#: drivers see different live sets for a moment)
COOLDOWN_S = 60.0


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


class Balancer:
    """One driver's side of balancing: its lease, what it holds, and which shards it should hand over."""

    def __init__(self, saga: SagaShape, clock: Callable[[], dt.datetime] = _utcnow, renew_s: float = RENEW_S,
                 ) -> None:
        driver = saga.config.layout.driver
        if driver is None:
            raise ValueError("a Balancer needs a saga with driver= set")
        self.config = saga.config
        self.me = driver
        self.store = LeaseStore(self.config.layout.leases)
        self.clock = clock
        self.renew_s = renew_s
        self.started = clock().isoformat()
        self.running: dict[str, str] = {}  # shard label -> when its query (re)started
        self._holding_since: dict[str, float] = {}  # shard label -> the renewal that first found it held
        self._cooldown: dict[str, float] = {}
        self._due: dict[str, str] = {}  # the last renewal's handovers; a tick between renewals returns them
        self._shards: dict[str, list[str]] = defaultdict(list)
        self._active: list[str] = []  # the labels of the shard queries that ran at the supervisor's last tick
        self._lock = threading.Lock()  # the supervisor and the renewer both tick
        self._renewer: Renewer | None = None
        for unit in saga.units():
            if unit.shard is not None:
                self._shards[unit.label].append(unit.unit_label)

    def started_query(self, label: str) -> None:
        """Note that the query of shard ``label`` (re)started now: what it held before is no evidence now."""
        with self._lock:
            self.running[label] = self.clock().isoformat()
            self._holding_since.pop(label, None)

    def handed(self, label: str) -> None:
        """Note that shard ``label`` was handed over (its query restarted as a standby)."""
        self.started_query(label)
        self._cooldown[label] = time.monotonic() + COOLDOWN_S

    def held(self, now: dt.datetime) -> dict[str, str]:
        """Shard label -> the finish time of this driver's last batch with messages there, for the shards it
        holds as far as its batches tell."""
        out = {}
        for label, since in self.running.items():
            counters = ReportStore(self.config.layout.root, label).counters(now)
            if counters.last_driver != self.me or counters.last_batch is None:
                continue
            last = dt.datetime.fromisoformat(counters.last_batch)
            if last >= dt.datetime.fromisoformat(since) and (now - last).total_seconds() <= HOLD_S:
                out[label] = counters.last_batch
        return out

    def tick(self, active: Iterable[str]) -> dict[str, str]:
        """The supervisor's tick: note ``active``, the labels of this driver's shard queries that run now (the
        next renewal writes them), and return the shards to hand over (label -> the driver that should hold it)
        as the last renewal found them, less those handed since: a handover that waits for its batch to end is
        still due a second later."""
        with self._lock:
            self._active = list(active)
            return self._not_cooling(self._due)

    def renew(self) -> dict[str, str]:
        """Rewrite this driver's lease, read the others' and find the shards to hand over (returned as
        :meth:`tick` does); the renewer thread's work."""
        with self._lock:
            now = self.clock()
            held = self.held(now)
            running = {label: self.running[label] for label in self._active if label in self.running}
            self.store.write(mine(self.me, self.started, now.timestamp(), running, held))
            leases = live(self.store.read_all(), now, path_of=self.store.path, me=self.me)
            assignment = assign(self._shards, [lease.holder for lease in leases])
            self._holding_since = {label: self._holding_since.get(label, now.timestamp()) for label in held}
            self._due = handovers(self.me, self._holding_since, assignment, leases, now)
            return self._not_cooling(self._due)

    def start(self, active: Iterable[str] = ()) -> None:
        """Write the lease now, ``active`` being the shard queries that run, then renew it from a thread of its own
        every :attr:`renew_s`. A renewal that fails is logged (here, once): the shards stay where they are, and
        the next one tries again (storage that cannot be read or written never stops the saga)."""
        self._active = list(active)
        try:
            self.renew()
        except Exception as exc:  # noqa: BLE001 - leases are for balance only; the broker keeps shards held
            self._renew_failed(exc)
        self._renewer = Renewer(self.me, self.renew, self.renew_s, self._renew_failed, path=self.store.path(self.me))
        self._renewer.start()

    def _renew_failed(self, exc: Exception) -> None:
        log.warning("saga %s: driver %s could not renew its lease (%s); shards stay where they are",
                    self.config.name, self.me, exc)

    def _not_cooling(self, due: dict[str, str]) -> dict[str, str]:
        return {label: target for label, target in due.items() if self._cooldown.get(label, 0.0) <= time.monotonic()}

    def close(self) -> None:
        """Stop renewing and remove this driver's lease: a driver that stopped cleanly is given no shards."""
        if self._renewer is not None:
            self._renewer.stop(wait_s=10.0)
        self.store.remove(self.me)
