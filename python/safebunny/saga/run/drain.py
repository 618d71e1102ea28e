"""Draining a saga, every step's query in availableNow rounds until no message waits, a step fed by other steps
reading on until they have ended, a failed step started again from its checkpoint; and the progress it measures
(what the steps received, what waits)."""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

from safebunny.saga.define import topology
from safebunny.saga.define.config import SagaRunner, SagaShape
from safebunny.saga.define.graph import graph_of, layout
from safebunny.saga.run.queries import (
    not_worth_a_restart,
    note_restart,
    note_serialization_race,
    start_query,
    try_start,
)
from safebunny.saga.run.reports import ReportStore
from safebunny.saga.run.worker_starts import TRIES, UnstartedSteps
from safebunny.spark.exceptions import error_of, is_worker_start_timeout, message_of
from safebunny.storage.pause import clear_await_file, write_await_file

__all__ = ["drain", "moved_so_far", "waiting", "idle", "layers"]

log = logging.getLogger("safebunny.saga")

#: how long :func:`idle` waits for the consumers of a round's ended queries to leave the step queues
IDLE_WAIT_S = 5.0


def drain(spark: Any, saga: SagaRunner, timeout_s: float = 600.0, restarts: int = 2, start: Any = start_query) -> int:
    """Run every step with ``availableNow`` in rounds until no message waits in a step queue or a retry tier (or
    a round moves nothing). Returns the number of rounds.

    A round starts every step's query at once. A step in a later layer of the saga's graph (fed by other steps)
    reads what arrives until every step in the layers before it has ended (the source's
    ``availableNowAwaitFile``), so one round carries a backlog through a chain of steps and their query starts
    overlap; a compensation flowing back to an earlier layer waits for the next round. A failed step starts again
    from its checkpoint in the next round, and its error is raised after ``restarts`` failures in a row
    (docs/sagas.md, "Running"). A query whose Python process Spark could not start in time never ran: it is
    started again as :mod:`safebunny.saga.run.worker_starts` says, up to its ``TRIES`` times in a row. ``start``
    starts one step's query (:func:`start_query`; a parameter for tests of this loop)."""
    if restarts < 0:
        raise ValueError(f"restarts must be >= 0, but got {restarts}")
    deadline = time.monotonic() + timeout_s
    rounds = 0
    failed: dict[str, int] = {}  # step label -> failures in a row
    unstarted = UnstartedSteps()  # steps whose queries did not start (their Python process), and how often in a row
    layer_of = layers(saga)
    order = sorted(set(layer_of.values()))
    name = uuid.uuid4().hex[:12]
    while True:
        rounds += 1
        before = moved_so_far(saga)
        # a layer's gate opens when every layer before it has ended; the first layer has none
        gates = {layer: saga.config.layout.drain_gate(f"{name}-{rounds}", layer) for layer in order[1:]}
        # side by side (a new driver's first one alone: start_query)
        queries = [(s, try_start(start, spark, saga, s, None, gates.get(layer_of[s.label]))) for s in saga.units()]
        errors: list[tuple[Any, BaseException]] = []
        try:
            for i, layer in enumerate(order):  # every query ends by itself (availableNow), failed or not
                errors += _ended([(s, q) for s, q in queries if layer_of[s.label] == layer], failed, unstarted)
                if i + 1 < len(order):
                    write_await_file(gates[order[i + 1]])
        except BaseException:
            for gate in gates.values():  # no query waits on a drain that raised or was interrupted
                write_await_file(gate)
            raise
        for gate in gates.values():
            clear_await_file(gate)
        for step, error in errors:
            if (failed.get(step.unit_label, 0) > restarts or unstarted.exhausted(step.unit_label)
                    or not_worth_a_restart(error)):
                raise (error_of(error) or error) from error  # safebunny's message on the last line
        pause = 0.0
        for step, error in errors:
            note_restart(saga, step.unit_label, error)  # started again in the next round, as the supervisor counts
            if is_worker_start_timeout(error):
                wait = unstarted.wait_for(step.unit_label)
                pause = max(pause, wait)
                log.warning("saga %s: step %s: Spark's Python process for its query did not connect back in time (a "
                            "loaded machine); starting it again in %.0f s (%d of %d)", saga.config.name,
                            step.unit_label, wait, unstarted.streak[step.unit_label], TRIES)
                continue
            log.warning("saga %s: step %s failed (%s); starting it again from its checkpoint (restart %d of %d)",
                        saga.config.name, step.unit_label, message_of(error), failed[step.unit_label], restarts)
            note_serialization_race(saga, step, error)
        time.sleep(pause)
        if not errors and idle(saga):
            return rounds
        moved = moved_so_far(saga) - before
        still = waiting(saga)
        if moved == 0 and still == 0 and not errors:
            return rounds
        if time.monotonic() > deadline:
            raise TimeoutError(f"saga {saga.config.name!r} did not drain in {timeout_s:.0f} s: {still} message(s) "
                               "still wait in step queues or retry tiers (a paused step, or retry delays longer than "
                               "the timeout?)")
        if moved == 0:
            time.sleep(0.5)  # messages wait in a retry tier's TTL, or a failed step starts again


def _ended(queries: list[tuple[Any, Any]], failed: dict[str, int], unstarted: UnstartedSteps
           ) -> list[tuple[Any, BaseException]]:
    """Wait for ``queries`` to end; their errors, counted in a row per step (``failed``, or ``unstarted`` for a
    query whose Python process did not start in time)."""
    errors = []
    for step, query in queries:
        _wait(query)
        error = query.exception()
        label = step.unit_label
        if error is None:
            failed.pop(label, None)
            unstarted.ran(label)
            continue
        errors.append((step, error))
        if is_worker_start_timeout(error):
            unstarted.missed(label)
        else:
            failed[label] = failed.get(label, 0) + 1
    return errors


def layers(saga: SagaShape) -> dict[str, int]:
    """Each step's (``node.type``) layer in the saga's graph: longest path from the producers, a compensation
    back to an earlier step not counted (:func:`safebunny.saga.define.graph.layout`)."""
    placed = layout(graph_of(saga.config.name, saga.steps))
    return {s.label: placed[s.label][0] for s in saga.steps}


def moved_so_far(saga: SagaShape) -> int:
    """Messages the steps received so far, in any process (drain's progress measure)."""
    return sum(ReportStore(saga.config.layout.root, u.unit_label).counters().totals["received"] for u in saga.units())


def waiting(saga: SagaShape) -> int:
    """Messages ready in the step queues and retry tiers."""
    return sum(d[0] for d in topology.depths(saga, _counted(saga)).values() if d is not None)


def _counted(saga: SagaShape) -> list[str]:
    """The queues a drain watches: the step queues and their retry tiers."""
    return [q.name for q in topology.plan(saga).queues if q.role in ("consumer", "retry")]


def idle(saga: SagaShape) -> bool:
    """Whether no message waits in a step queue or retry tier and no consumer is left on one, after up to
    :data:`IDLE_WAIT_S` for the consumers of ended queries to go: one still attached may hold prefetched messages
    that a count of ready ones cannot see (a consumer of another driver's running saga, too: not idle then)."""
    names = _counted(saga)
    until = time.monotonic() + IDLE_WAIT_S
    while True:
        found = [d for d in topology.depths(saga, names).values() if d is not None]
        ready, consumers = sum(d[0] for d in found), sum(d[1] for d in found)
        if ready > 0 or consumers == 0 or time.monotonic() >= until:
            return ready == 0 and consumers == 0
        time.sleep(0.1)


def _wait(query: Any) -> None:
    """Wait for ``query`` to end. PySpark's ``awaitTermination`` raises the error of a failed query; the
    caller reads it from ``query.exception()`` and counts it against the step's restarts."""
    try:
        query.awaitTermination()
    except Exception:  # noqa: BLE001, S110 - read back through query.exception()
        if query.exception() is None:
            raise
