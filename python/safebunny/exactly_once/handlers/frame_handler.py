"""Running a DataFrame handler once on a batch's new messages, failing rows isolated by bisecting.

The handler gets the new messages as a local DataFrame (:meth:`~safebunny.exactly_once.collect.batch.NewMessages.frame`)
and its outcome is collected to Arrow at once (:func:`~safebunny.exactly_once.collect.materialize.from_frames`), so
nothing is applied or published yet when a job fails: :mod:`~safebunny.exactly_once.handlers.isolate` then finds
the failing rows (docs/exactly-once.md). An error in the handler's plan fails the query instead.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from safebunny.crashpoints import crash_point
from safebunny.errors import SafeBunnyOptionError
from safebunny.exactly_once.collect.batch import NewMessages
from safebunny.exactly_once.collect.local_collect import LOCAL_ROWS
from safebunny.exactly_once.collect.materialize import Materialized, from_frames, merge_all
from safebunny.exactly_once.handlers.isolate import bisect
from safebunny.exactly_once.outcome import FailedRow, StepContext

__all__ = ["run_frames"]

log = logging.getLogger("safebunny.step")


def run_frames(spark: Any, new: NewMessages, handler: Callable[[Any, StepContext], Any], ctx: StepContext,
               max_jobs: int) -> Materialized:
    """The outcome of ``handler`` on ``new``, the rows that make it fail isolated in up to ``max_jobs`` sub-jobs."""
    if not new.count:
        return Materialized()

    def run(positions: Any) -> Materialized:
        subset = new.frame(spark, positions)
        crash_point("step.in_handler")
        return from_frames(handler(subset, ctx), local=len(positions) <= LOCAL_ROWS)

    isolation = bisect(list(range(new.count)), run, max_jobs, fatal=_is_plan_error)
    result = merge_all(isolation.results)
    for position, (error_type, reason) in isolation.failed.items():
        mid, correlation = new.ids[position], new.correlations[position]
        result.failed[mid] = FailedRow(mid, reason, 1, correlation, error_type)
    if isolation.failed:
        error_type, reason = next(iter(isolation.failed.values()))
        log.warning("step %s batch %d: %d of %d rows failed in the handler and were isolated (%d sub-jobs); "
                    "the first: %s: %s", ctx.node, ctx.batch_id, len(isolation.failed), new.count,
                    isolation.jobs, error_type, " ".join((reason or "").split())[:300])
    return result


def _is_plan_error(exc: BaseException) -> bool:
    """Errors in the handler's plan (a bad column, a wrong return) fail the query instead of the rows."""
    from pyspark.errors import AnalysisException  # a handler's job ran: PySpark is there

    return isinstance(exc, (SafeBunnyOptionError, AnalysisException))
