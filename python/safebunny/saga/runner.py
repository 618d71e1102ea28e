"""Running a saga: one streaming query per step, a supervisor that restarts failed steps, and draining.

Every step's query is named ``<saga>.<node>.<type>`` and keeps its checkpoint and journal under the
saga's root (``checkpoints/<node>.<type>``, ``journal/<node>.<type>``), so a restart, or the next
``drain``, goes on where the last one stopped (the same epoch, the same inbox rows).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from typing import Any

from safebunny import first_stream
from safebunny.errors import SafeBunnyPlanError
from safebunny.saga import topology
from safebunny.saga.balance import Balancer
from safebunny.saga.config import SagaRunner, SagaShape
from safebunny.saga.definition import SagaStep
from safebunny.saga.leases import TTL_S
from safebunny.saga.recorder import batch_function
from safebunny.session import activate, read_stream
from safebunny.spark_errors import error_of, is_plan_error, is_worker_start_timeout, message_of
from safebunny.spark_logs import note_streaming_started

__all__ = ["RunningSaga", "source_frame", "start_query", "drain", "moved_so_far", "waiting", "interval_ms", "is_entry",
           "AVAILABLE_NOW", "IDLE_ROUND_S", "is_available_now"]

log = logging.getLogger("safebunny.saga")
#: how long a handover waits for the shard's running batch to end before it stops the query anyway
HANDOVER_WAIT_S = 30.0
#: ``saga.run(spark, trigger=AVAILABLE_NOW)``: rounds of availableNow queries (Databricks serverless)
AVAILABLE_NOW = "availableNow"
#: in rounds, how long a step whose last round read nothing waits before its next round
IDLE_ROUND_S = 2.0
#: queries in a row whose Python process Spark could not start in time (its fixed 10 s to connect back, missed on a
#: loaded machine) that :func:`drain` starts again before it raises: they never ran, so they are not the step's
#: restarts; each waits :data:`WORKER_START_WAIT_S` times its number first, for the load to pass
WORKER_START_TRIES = 6
WORKER_START_WAIT_S = 2.0


def is_available_now(trigger: str | None) -> bool:
    """Whether ``trigger`` asks for availableNow rounds (``"availableNow"``, any case, ``-``/``_`` ignored)."""
    return trigger is not None and trigger.replace("-", "").replace("_", "").lower() == "availablenow"


def source_frame(spark: Any, saga: SagaShape, step: SagaStep, trigger: str | None = None) -> Any:
    """The streaming DataFrame of step ``step``'s queue. The password goes in the ``password`` option
    (``saga.uri`` holds none), which Spark redacts in query plans."""
    activate(spark)
    config, layout = saga.config, saga.config.layout
    options = {"uri": config.uri, "queue": topology.consumer_queue(config, step.node, step.consumes, step.shard),
               "queueType": "quorum" if config.quorum else "classic", "includeHeaders": "true",
               "journalLocation": layout.journal(step.unit_label),
               "maxMessagesPerTrigger": str(step.batch_size),
               "pauseFile": layout.pause_file(step.node, step.consumes)}
    interval = None if trigger is None else interval_ms(trigger)
    if interval is not None and is_entry(saga, step):
        # the source keeps the interval; the query runs with a zero trigger (start_query). A step fed by other
        # steps is not paced: it takes each upstream output as it arrives (safebunny.source.admission)
        options["minBatchIntervalMs"] = str(max(1, int(interval)))
    if step.shard is not None:  # a shard's queue has a single active consumer: never cancel and re-consume
        options["singleActiveConsumer"] = "true"
    if config.password is not None:
        options["password"] = config.password
    return read_stream(spark, **options)


def is_entry(saga: SagaShape, step: SagaStep) -> bool:
    """Whether ``step``'s messages come from outside the saga (``saga.start``, a producer of yours), not from
    another step's emits."""
    return not any(other.node == step.from_node for other in saga.steps)


def start_query(spark: Any, saga: SagaRunner, step: SagaStep, trigger: str | None) -> Any:
    """Start step ``step``'s query (``trigger`` a processing-time interval, or ``None`` for availableNow)."""
    writer = (source_frame(spark, saga, step, trigger).writeStream
              .foreachBatch(batch_function(saga, step))  # stores each report wherever it runs (Connect: the server)
              .option("checkpointLocation", saga.config.layout.checkpoint(step.unit_label))
              .queryName(f"{saga.config.name}.{step.unit_label}"))
    if trigger is None:
        writer = writer.trigger(availableNow=True)
    else:
        # a processing-time trigger starts every step at the same multiples of its interval, so each hop waited a
        # whole interval for the next one; the source paces the batches instead (safebunny.source.admission)
        writer = writer.trigger(processingTime="0 seconds" if interval_ms(trigger) is not None else trigger)
    query = first_stream.start(spark, writer)  # a new driver's first query alone: see safebunny.first_stream
    note_streaming_started(spark)
    return query


_INTERVAL = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|milliseconds?|s|seconds?|m|minutes?|h|hours?)\s*$", re.I)
_INTERVAL_MS = {"ms": 1, "millisecond": 1, "milliseconds": 1, "s": 1000, "second": 1000, "seconds": 1000,
                "m": 60_000, "minute": 60_000, "minutes": 60_000, "h": 3_600_000, "hour": 3_600_000,
                "hours": 3_600_000}


def interval_ms(trigger: str) -> float | None:
    """A processing-time trigger's interval in milliseconds (``"1 second"`` -> 1000.0), or None."""
    match = _INTERVAL.match(trigger)
    return None if not match else float(match[1]) * _INTERVAL_MS[match[2].lower()]


class RunningSaga:
    """All steps of a saga running continuously; a supervisor restarts a failed step with backoff.

    The backoff doubles with each failure in a row (1, 2, 4, ... seconds, at most ``max_backoff_s``) and starts
    again from one second once a restarted query has run for :attr:`HEALTHY_S` without failing (or an
    availableNow round ended well), so a step that failed a few times last week restarts at once today.

    With ``trigger="availableNow"`` (:data:`AVAILABLE_NOW`, the only trigger Databricks serverless allows) each
    step runs in rounds: its query reads what its queue holds when it starts, ends by itself, and the supervisor
    starts the next round at its next tick (every second), or :data:`IDLE_ROUND_S` later when the round read
    nothing. A failed round is restarted with backoff as a failed query is. ``rounds`` counts each step's ended
    rounds."""

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
        #: among several drivers (``Saga(driver=...)``): this driver's lease and its share of the shards
        self.balancer = Balancer(saga) if balance and saga.config.layout.driver is not None else None
        self.queries: dict[str, Any] = {s.unit_label: self._first_start(s) for s in saga.units()}
        #: step label -> restarts since the saga started (every failure counts)
        self.restarts: dict[str, int] = {label: 0 for label in self.queries}
        #: step label -> failures since its query last ran well (what the backoff doubles with)
        self.failing: dict[str, int] = {label: 0 for label in self.queries}
        self._restarted_at: dict[str, float] = {}
        #: steps whose last query failed only because Spark's Python process for it did not start in time
        self._unstarted: set[str] = set()
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

    def _first_start(self, step: SagaStep) -> Any:
        """Start ``step``'s query; one that fails to start is restarted by the supervisor, as a failed one is
        (over Spark Connect the server's Python process for the query may miss Spark's 10 s to connect back)."""
        try:
            return self._start(step)
        except Exception as exc:  # noqa: BLE001 - logged and retried by the supervisor
            return _NotStarted(exc)

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
                query = self.queries[step.unit_label]
                now = time.monotonic()
                if query.isActive:
                    self._note_healthy(step.unit_label, now)
                if query.isActive or self._stop.is_set() or step.unit_label in self.given_up:
                    continue
                if self.in_rounds and step.unit_label not in retry_at and self._round_ended(step, query, now,
                                                                                            next_round):
                    continue
                if step.unit_label not in retry_at:
                    failure = query.exception()
                    if failure is not None:
                        self.errors[step.unit_label] = error_of(failure) or failure
                    if failure is not None and _not_worth_a_restart(failure):
                        self.given_up.add(step.unit_label)
                        log.error("saga %s: step %s stopped and is not restarted: %s", self.saga.config.name,
                                  step.unit_label, message_of(failure))
                        continue
                    unstarted = is_worker_start_timeout(failure)  # a loaded machine: it never ran, back soon
                    backoff = (WORKER_START_WAIT_S if unstarted
                               else min(self.max_backoff_s, 2.0 ** self.failing[step.unit_label]))
                    if unstarted:
                        self._unstarted.add(step.unit_label)
                    retry_at[step.unit_label] = now + backoff
                    # one line: safebunny's message, not the query's Python and Java traces
                    log.error("saga %s: step %s stopped (%s); restarting in %.0f s", self.saga.config.name,
                              step.unit_label, message_of(failure) if failure is not None else "no error", backoff)
                    _note_serialization_race(self.saga, step, failure)
                if now >= retry_at[step.unit_label]:
                    del retry_at[step.unit_label]
                    self.restarts[step.unit_label] += 1
                    if step.unit_label in self._unstarted:
                        self._unstarted.discard(step.unit_label)
                    else:
                        self.failing[step.unit_label] += 1
                    self._restarted_at[step.unit_label] = now
                    try:
                        self.queries[step.unit_label] = self._start(step)
                    except Exception as exc:  # noqa: BLE001 - logged, retried with a longer backoff
                        log.error("saga %s: restarting step %s failed: %s", self.saga.config.name, step.unit_label, exc)
            if self.balancer is not None and not self._stop.is_set():
                self._balance()

    def _note_healthy(self, label: str, now: float) -> None:
        """A restarted query still running :attr:`HEALTHY_S` after its restart ends its step's failure streak."""
        if self.failing[label] and now - self._restarted_at.get(label, now) >= self.HEALTHY_S:
            self.failing[label] = 0

    def _round_ended(self, step: SagaStep, query: Any, now: float, next_round: dict[str, float]) -> bool:
        """availableNow: whether ``query`` is a round that ended without an error, handled here (its next round
        started now, or after :data:`IDLE_ROUND_S` when it read nothing); False for a failed one."""
        label = step.unit_label
        if label not in next_round:
            if isinstance(query, _NotStarted) or query.exception() is not None:
                return False
            self.rounds[label] = self.rounds.get(label, 0) + 1
            self.failing[label] = 0  # a round that ended well: the next failure's backoff starts again
            next_round[label] = now + (0.0 if _read_rows(query) else IDLE_ROUND_S)
        if now < next_round[label]:
            return True
        del next_round[label]
        try:
            self.queries[label] = self._start(step)
        except Exception as exc:  # noqa: BLE001 - the supervisor restarts it like a failed query
            self.queries[label] = _NotStarted(exc)
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
            try:
                self.queries[label] = self._start(units[label])
            except Exception as exc:  # noqa: BLE001 - the supervisor restarts it like a failed query
                self.queries[label] = _NotStarted(exc)

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


def drain(spark: Any, saga: SagaRunner, timeout_s: float = 600.0, on_round: Any = None, restarts: int = 2,
          start: Any = start_query) -> int:
    """Run every step with ``availableNow`` in rounds until a round moves nothing and no message waits
    in a step queue or a retry tier. Returns the number of rounds.

    A step whose query fails is started again in the next round, from its checkpoint (the same batch, the
    same message ids: its inbox drops what it already applied), as :class:`RunningSaga`'s supervisor does:
    a failure of the moment (a broker restart) does not end the drain. After ``restarts`` such restarts of
    one step in a row, its error is raised: safebunny's own error when the query carried one
    (:func:`safebunny.error_of`), with Spark's exception as its cause. A query whose Python process Spark could
    not start in time (a loaded machine) is not one of those restarts: it never ran, and it is started again, up
    to :data:`WORKER_START_TRIES` times in a row. ``start`` starts one step's query (:func:`start_query`; a
    parameter for tests of this loop)."""
    if restarts < 0:
        raise ValueError(f"restarts must be >= 0, but got {restarts}")
    deadline = time.monotonic() + timeout_s
    rounds = 0
    failed: dict[str, int] = {}  # step label -> failures in a row
    unstarted: dict[str, int] = {}  # step label -> queries in a row whose Python process did not start in time
    errors: list[tuple[Any, BaseException]] = []
    while True:
        rounds += 1
        before = moved_so_far(saga)
        queries = []  # side by side (a new driver's first one alone: start_query)
        for s in saga.units():
            try:
                query = start(spark, saga, s, None)
            except Exception as exc:  # noqa: BLE001 - a query that did not start counts as a failed step
                # (over Spark Connect the server starts a Python process per query, which must connect back
                # within Spark's fixed 10 s; a loaded server misses it now and then)
                query = _NotStarted(exc)
            queries.append((s, query))
        errors = []
        for step, query in queries:  # every query ends by itself (availableNow), failed or not
            _wait(query)
            error = query.exception()
            label = step.unit_label
            if error is None:
                failed.pop(label, None)
                unstarted.pop(label, None)
                continue
            errors.append((step, error))
            counts = unstarted if is_worker_start_timeout(error) else failed
            counts[label] = counts.get(label, 0) + 1
        for step, error in errors:
            if (failed.get(step.unit_label, 0) > restarts or unstarted.get(step.unit_label, 0) > WORKER_START_TRIES
                    or _not_worth_a_restart(error)):
                raise (error_of(error) or error) from error  # safebunny's message on the last line
        pause = 0.0
        for step, error in errors:
            if is_worker_start_timeout(error):
                tries = unstarted[step.unit_label]
                pause = max(pause, WORKER_START_WAIT_S * tries)
                log.warning("saga %s: step %s: Spark's Python process for its query did not connect back in time (a "
                            "loaded machine); starting it again in %.0f s (%d of %d)", saga.config.name,
                            step.unit_label, WORKER_START_WAIT_S * tries, tries, WORKER_START_TRIES)
                continue
            log.warning("saga %s: step %s failed (%s); starting it again from its checkpoint (restart %d of %d)",
                        saga.config.name, step.unit_label, message_of(error), failed[step.unit_label], restarts)
            _note_serialization_race(saga, step, error)
        time.sleep(pause)
        moved = moved_so_far(saga) - before
        still = waiting(saga)
        if on_round is not None:
            on_round(rounds, moved, still)
        if moved == 0 and still == 0 and not errors:
            return rounds
        if time.monotonic() > deadline:
            raise TimeoutError(f"saga {saga.config.name!r} did not drain in {timeout_s:.0f} s: {still} message(s) "
                               "still wait in step queues or retry tiers (a paused step, or retry delays longer than "
                               "the timeout?)")
        if moved == 0:
            time.sleep(0.5)  # messages wait in a retry tier's TTL, or a failed step starts again


def moved_so_far(saga: SagaShape) -> int:
    """Messages the steps received so far, in any process (drain's progress measure)."""
    return sum(saga.config.layout.reports(u.unit_label).counters().totals["received"] for u in saga.units())


def waiting(saga: SagaShape) -> int:
    """Messages ready in the step queues and retry tiers."""
    names = [q.name for q in topology.plan(saga).queues if q.role in ("consumer", "retry")]
    return sum(d[0] for d in topology.depths(saga, names).values() if d is not None)


def _read_rows(query: Any) -> bool:
    """Whether an ended query read any rows (its progress; True when it cannot say, so the next round is not
    delayed)."""
    try:
        return any((p or {}).get("numInputRows", 0) for p in query.recentProgress)
    except Exception:  # noqa: BLE001 - a query that cannot say counts as busy
        return True


def _not_worth_a_restart(error: BaseException) -> bool:
    """A plan error (an unknown column, a type mismatch in a handler) fails every restart the same way."""
    return isinstance(error_of(error), SafeBunnyPlanError) or is_plan_error(error)


def _note_serialization_race(saga: SagaShape, step: SagaStep, error: BaseException | None) -> None:
    """One more line when a step failed in Spark's task serialisation on a collection that changed size: with
    every start through :func:`start_query` the source's shared map no longer does, so say what it is."""
    if error is not None and first_stream.is_serialization_race(error):
        log.warning("saga %s: step %s: Spark could not serialise a task because a collection in it changed size "
                    "meanwhile (the map Spark shares between the queries of format('safebunny'), see "
                    "safebunny.first_stream: were queries of this format started elsewhere at the same time?); if "
                    "it repeats in this driver, start a new driver", saga.config.name, step.unit_label)


def _wait(query: Any) -> None:
    """Wait for ``query`` to end. PySpark's ``awaitTermination`` raises the error of a failed query; the
    caller reads it from ``query.exception()`` and counts it against the step's restarts."""
    try:
        query.awaitTermination()
    except Exception:  # noqa: BLE001, S110 - read back through query.exception()
        if query.exception() is None:
            raise


class _NotStarted:
    """A step query whose start failed, shaped as a failed query for :func:`drain`."""

    isActive = False  # noqa: N815 - the StreamingQuery attribute it stands for

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def stop(self) -> None:
        return None

    def awaitTermination(self) -> None:  # noqa: N802 - the StreamingQuery method it stands for
        return None

    def exception(self) -> BaseException:
        return self.error

