"""Balancing a sharded saga's shards between its live drivers (the I/O around :mod:`safebunny.saga.leases`).

:class:`RunningSaga <safebunny.saga.runner.RunningSaga>` of a saga with ``driver=`` calls :meth:`Balancer.tick`
from its supervisor about once a second and restarts the query of each shard it gets back; the lease is
written only by :meth:`Balancer.renew`, from a renewer thread (:meth:`Balancer.start`) every
:data:`~safebunny.saga.leases.RENEW_S` seconds. This driver holds a shard when the shard's stored reports
(:mod:`safebunny.saga.reports`) name its own last batch with messages, finished after its query for the shard
last (re)started and within :data:`HOLD_S`. The rules: docs/sagas.md ("Balance between live drivers").
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable

from safebunny.saga.config import SagaShape
from safebunny.saga.leases import RENEW_S, LeaseStore, assign, handovers, live, mine
from safebunny.storage.lease import Renewer

__all__ = ["Balancer", "HOLD_S"]

log = logging.getLogger("safebunny.saga")

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
            counters = self.config.layout.reports(label).counters(now)
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
