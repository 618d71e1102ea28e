"""Draining a saga, every step's query in availableNow rounds until nothing moves and nothing waits, a failed
step started again from its checkpoint; and the progress it measures (what the steps received, what waits)."""

from __future__ import annotations

import logging
import time
from typing import Any

from safebunny.saga import topology
from safebunny.saga.config import SagaRunner, SagaShape
from safebunny.saga.queries import (
    WORKER_START_TRIES,
    WORKER_START_WAIT_S,
    not_worth_a_restart,
    note_restart,
    note_serialization_race,
    start_query,
    try_start,
)
from safebunny.spark.exceptions import error_of, is_worker_start_timeout, message_of

__all__ = ["drain", "moved_so_far", "waiting"]

log = logging.getLogger("safebunny.saga")


def drain(spark: Any, saga: SagaRunner, timeout_s: float = 600.0, restarts: int = 2, start: Any = start_query) -> int:
    """Run every step with ``availableNow`` in rounds until a round moves nothing and no message waits
    in a step queue or a retry tier. Returns the number of rounds.

    A failed step starts again from its checkpoint in the next round, and its error is raised after
    ``restarts`` failures in a row (docs/sagas.md, "Running"). A query whose Python process Spark could not
    start in time never ran: it is started again, up to :data:`WORKER_START_TRIES` times in a row. ``start``
    starts one step's query (:func:`start_query`; a parameter for tests of this loop)."""
    if restarts < 0:
        raise ValueError(f"restarts must be >= 0, but got {restarts}")
    deadline = time.monotonic() + timeout_s
    rounds = 0
    failed: dict[str, int] = {}  # step label -> failures in a row
    unstarted: dict[str, int] = {}  # step label -> queries in a row whose Python process did not start in time
    while True:
        rounds += 1
        before = moved_so_far(saga)
        # side by side (a new driver's first one alone: start_query)
        queries = [(s, try_start(start, spark, saga, s, None)) for s in saga.units()]
        errors: list[tuple[Any, BaseException]] = []
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
                    or not_worth_a_restart(error)):
                raise (error_of(error) or error) from error  # safebunny's message on the last line
        pause = 0.0
        for step, error in errors:
            note_restart(saga, step.unit_label, error)  # started again in the next round, as the supervisor counts
            if is_worker_start_timeout(error):
                tries = unstarted[step.unit_label]
                pause = max(pause, WORKER_START_WAIT_S * tries)
                log.warning("saga %s: step %s: Spark's Python process for its query did not connect back in time (a "
                            "loaded machine); starting it again in %.0f s (%d of %d)", saga.config.name,
                            step.unit_label, WORKER_START_WAIT_S * tries, tries, WORKER_START_TRIES)
                continue
            log.warning("saga %s: step %s failed (%s); starting it again from its checkpoint (restart %d of %d)",
                        saga.config.name, step.unit_label, message_of(error), failed[step.unit_label], restarts)
            note_serialization_race(saga, step, error)
        time.sleep(pause)
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


def moved_so_far(saga: SagaShape) -> int:
    """Messages the steps received so far, in any process (drain's progress measure)."""
    return sum(saga.config.layout.reports(u.unit_label).counters().totals["received"] for u in saga.units())


def waiting(saga: SagaShape) -> int:
    """Messages ready in the step queues and retry tiers."""
    names = [q.name for q in topology.plan(saga).queues if q.role in ("consumer", "retry")]
    return sum(d[0] for d in topology.depths(saga, names).values() if d is not None)


def _wait(query: Any) -> None:
    """Wait for ``query`` to end. PySpark's ``awaitTermination`` raises the error of a failed query; the
    caller reads it from ``query.exception()`` and counts it against the step's restarts."""
    try:
        query.awaitTermination()
    except Exception:  # noqa: BLE001, S110 - read back through query.exception()
        if query.exception() is None:
            raise
