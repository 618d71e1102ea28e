"""Which drivers run a saga now by their leases, which shards each holds, and who should hold which.

The broker decides who holds a shard (single active consumer); leases decide only the balance. Each driver
rewrites ``<root>/drivers/_leases/<driver>.json`` (a :mod:`safebunny.storage.lease`) from a renewer thread;
from the live leases every driver computes the same assignment (:func:`assign`) and hands a shard on by
restarting its query for it (:func:`handovers`). Correctness never rests on a lease (docs/sagas.md,
``drivers/_leases/``). A driver lives by the one rule of every lease (:meth:`safebunny.storage.lease.Lease.live`,
with :data:`TTL_S`: the hosts' clocks must agree to within a few seconds of it); its lease is that record, its
holder the driver, its payload what :func:`mine` names.

The module is pure but for :class:`LeaseStore`, which reads and writes the files.
"""

from __future__ import annotations

import datetime as dt
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace

from safebunny.storage.lease import Lease, read_leases, write_lease
from safebunny.storage.location import resolve_location
from safebunny.storage.records import remove_record

__all__ = ["LeaseStore", "age", "assign", "handovers", "live", "mine", "TTL_S", "SETTLE_S"]

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
