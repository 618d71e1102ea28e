"""Running a saga as one streaming query per step (:mod:`~safebunny.saga.run.queries`), a supervisor that restarts
failed steps with backoff, runs availableNow rounds, and hands shards over between drivers."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from safebunny.saga.define.config import SagaRunner
from safebunny.saga.define.definition import SagaStep
from safebunny.saga.run.leases import TTL_S, Balancer
from safebunny.saga.run.queries import (
    NotStarted,
    is_available_now,
    not_worth_a_restart,
    note_restart,
    note_serialization_race,
    start_query,
    try_start,
)
from safebunny.saga.run.worker_starts import UnstartedSteps
from safebunny.spark.exceptions import error_of, is_worker_start_timeout, message_of
from safebunny.spark.session import activate

__all__ = ["RunningSaga", "IDLE_ROUND_S"]

log = logging.getLogger("safebunny.saga")
#: how long a handover waits for the shard's running batch to end before it stops the query anyway
HANDOVER_WAIT_S = 30.0
#: in rounds, how long a step whose last round read nothing waits before its next round
IDLE_ROUND_S = 2.0


class RunningSaga:
    """All steps of a saga running continuously; a supervisor restarts a failed step with backoff.

    The backoff doubles with each failure in a row (1, 2, 4, ... seconds, at most ``max_backoff_s``) and starts
    again from one second once a restarted query has run for :attr:`HEALTHY_S` without failing (or an
    availableNow round ended well), so a step that failed a few times last week restarts at once today. A query that
    never started (Spark's Python process for it missed its fixed 10 s to connect back: a loaded machine) is not the
    step's failure: such steps start again as :mod:`safebunny.saga.run.worker_starts` says (one at a time, after
    2, 4, ... 32 seconds as its misses in a row grow).

    With ``trigger="availableNow"`` each step runs in rounds, the next one started at the
    supervisor's next tick or :data:`IDLE_ROUND_S` later after an empty round (docs/databricks.md, "Run modes");
    ``rounds`` counts each step's ended rounds."""

    #: a restarted query that has run this long without failing resets its step's backoff
    HEALTHY_S = 60.0

    def __init__(self, spark: Any, saga: SagaRunner, trigger: str, max_backoff_s: float = 60.0,
                 balance: bool = True) -> None:
        self.spark = spark
        self.saga = saga
        self.trigger = trigger
        #: rounds of availableNow queries instead of processing-time queries that run until stopped
        self.in_rounds = is_available_now(trigger)
        self.max_backoff_s = max_backoff_s
        #: step label -> rounds that ended without an error (availableNow only)
        self.rounds: dict[str, int] = {}
        #: among several drivers (``SagaSettings(driver=...)``): this driver's lease and its share of the shards
        self.balancer = Balancer(saga) if balance and saga.config.layout.driver is not None else None
        self.queries: dict[str, Any] = {s.unit_label: try_start(self._start, s) for s in saga.units()}
        #: step label -> restarts since the saga started (every failure counts)
        self.restarts: dict[str, int] = {label: 0 for label in self.queries}
        #: step label -> failures since its query last ran well (what the backoff doubles with)
        self.failing: dict[str, int] = {label: 0 for label in self.queries}
        self._restarted_at: dict[str, float] = {}
        #: steps whose last query never started (Spark's Python process for it did not connect back in time)
        self.unstarted = UnstartedSteps()
        #: each step's last failure: safebunny's own error when the query carried one (:func:`safebunny.error_of`)
        self.errors: dict[str, BaseException] = {}
        #: shards due to be handed over -> when the handover was first due (it waits for the batch to end)
        self._handing: dict[str, float] = {}
        #: steps stopped by a plan error (:class:`~safebunny.errors.SafeBunnyPlanError`): not restarted
        self.given_up: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._supervise, name=f"safebunny-saga-{saga.config.name}", daemon=True)
        self._thread.start()
        if self.balancer is not None:
            self.balancer.start([label for label, q in self.queries.items() if q.isActive])

    def _start(self, step: SagaStep) -> Any:
        query = start_query(self.spark, self.saga, step, None if self.in_rounds else self.trigger)
        if self.balancer is not None and step.shard is not None:
            self.balancer.started_query(step.unit_label)
        return query

    def _supervise(self) -> None:
        activate(self.spark)
        retry_at: dict[str, float] = {}
        next_round: dict[str, float] = {}  # availableNow: a step whose round read nothing -> when it goes again
        while not self._stop.wait(1.0):
            for step in self.saga.units():
                label, name = step.unit_label, self.saga.config.name
                query = self.queries[label]
                now = time.monotonic()
                # a restarted query still running HEALTHY_S after its restart ends its step's failure streak
                if query.isActive and now - self._restarted_at.get(label, now) >= self.HEALTHY_S:
                    self.failing[label] = 0
                    self.unstarted.ran(label)
                if query.isActive or self._stop.is_set() or label in self.given_up:
                    continue
                if self.in_rounds and label not in retry_at and self._round_ended(step, query, now, next_round):
                    continue
                if label not in retry_at:
                    failure = query.exception()
                    if failure is not None:
                        self.errors[label] = error_of(failure) or failure
                    if failure is not None and not_worth_a_restart(failure):
                        self.given_up.add(label)
                        log.error("saga %s: step %s stopped and is not restarted: %s", name, label, message_of(failure))
                        continue
                    if is_worker_start_timeout(failure):  # a loaded machine: it never ran, back soon
                        backoff = self.unstarted.missed(label)
                    else:
                        backoff = min(self.max_backoff_s, 2.0 ** self.failing[label])
                    retry_at[label] = now + backoff
                    # one line: safebunny's message, not the query's Python and Java traces
                    log.error("saga %s: step %s stopped (%s); restarting in %.0f s", name, label,
                              message_of(failure) if failure is not None else "no error", backoff)
                    note_serialization_race(self.saga, step, failure)
                if now >= retry_at[label]:
                    start = self.unstarted.starting(label, now)
                    if start == "wait":
                        continue  # another step that missed started less than its stagger ago
                    del retry_at[label]
                    self.restarts[label] += 1
                    note_restart(self.saga, label, self.errors.get(label))
                    if start == "restart":  # a query that never ran is no failure of the step's
                        self.failing[label] += 1
                    self._restarted_at[label] = now
                    try:
                        self.queries[label] = self._start(step)
                    except Exception as exc:  # noqa: BLE001 - logged, retried with a longer backoff
                        log.error("saga %s: restarting step %s failed: %s", name, label, exc)
            if self.balancer is not None and not self._stop.is_set():
                self._balance()

    def _round_ended(self, step: SagaStep, query: Any, now: float, next_round: dict[str, float]) -> bool:
        """availableNow: whether ``query`` is a round that ended without an error, handled here (its next round
        started now, or after :data:`IDLE_ROUND_S` when it read nothing); False for a failed one."""
        label = step.unit_label
        if label not in next_round:
            if isinstance(query, NotStarted) or query.exception() is not None:
                return False
            self.rounds[label] = self.rounds.get(label, 0) + 1
            self.failing[label] = 0  # a round that ended well: the next failure's backoff starts again
            next_round[label] = now + (0.0 if _read_rows(query) else IDLE_ROUND_S)
        if now < next_round[label]:
            return True
        del next_round[label]
        self.queries[label] = try_start(self._start, step)
        return True

    def _balance(self) -> None:
        """Hand each shard this driver holds and the live drivers' assignment gives to another over: stop its
        query (its consumer leaves, the broker activates the next waiting one) and start it again as a standby.
        The lease itself is renewed by the balancer's own thread (:meth:`Balancer.start`)."""
        assert self.balancer is not None
        due = self.balancer.tick([label for label, q in self.queries.items() if q.isActive])
        for label in set(self._handing) - set(due):  # no longer due (the live drivers changed): forget its wait
            del self._handing[label]
        units = {s.unit_label: s for s in self.saga.units()} if due else {}
        for label, target in sorted(due.items()):
            if not self._between_batches(label):
                continue  # asked again at the next tick: a handover waits for the running batch to end
            log.info("saga %s: driver %s hands shard %s to driver %s (the live drivers' share)", self.saga.config.name,
                     self.saga.config.layout.driver, label, target)
            self._handing.pop(label, None)
            self.queries[label].stop()
            self.balancer.handed(label)
            self.queries[label] = try_start(self._start, units[label])

    def _between_batches(self, label: str) -> bool:
        """Whether the shard's query runs no batch now (a handover stops it there, not mid-batch), or has not
        come between batches within :data:`HANDOVER_WAIT_S` (then it is stopped anyway: the fence keeps a
        stopped batch's replay beside the new holder exact, docs/exactly-once.md)."""
        first = self._handing.setdefault(label, time.monotonic())
        try:
            active = bool(self.queries[label].status.get("isTriggerActive"))
        except Exception:  # noqa: BLE001 - a query that cannot say is treated as busy until the wait ends
            active = True
        return not active or time.monotonic() - first > HANDOVER_WAIT_S

    def stop(self) -> None:
        """Stop every step's query (each finishes its running batch) and the supervisor."""
        self._stop.set()
        self._thread.join(timeout=10)
        for query in self.queries.values():
            query.stop()
        if self.balancer is not None:
            try:
                self.balancer.close()
            except Exception as exc:  # noqa: BLE001 - a lease left behind expires by itself
                log.warning("saga %s: driver %s could not remove its lease (%s); it expires in %.0f s",
                            self.saga.config.name, self.saga.config.layout.driver, exc, TTL_S)

    def __enter__(self) -> RunningSaga:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _read_rows(query: Any) -> bool:
    """Whether an ended query read any rows (its progress; True when it cannot say, so the next round is not
    delayed)."""
    try:
        return any((p or {}).get("numInputRows", 0) for p in query.recentProgress)
    except Exception:  # noqa: BLE001 - a query that cannot say counts as busy
        return True
