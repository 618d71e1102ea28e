"""Running a DataFrame handler once on a batch's new messages, failing rows isolated by bisecting.

The handler gets the new messages as a local DataFrame (:meth:`~safebunny.exactly_once.collect.batch.NewMessages.frame`)
and its outcome is collected to Arrow at once (:func:`~safebunny.exactly_once.collect.materialize.from_frames`), so
nothing is applied or published yet when a job fails: :func:`bisect` then finds the failing rows
(docs/exactly-once.md). An error in the handler's plan fails the query instead.

A batch is replayed exactly after a crash, so a row that makes the handler fail would fail the query at every
restart. :func:`bisect` runs the handler on halves of the failing set, within a budget of sub-jobs, until the
failing rows stand alone; those are returned with the reason (:func:`describe`), the others with their results.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from safebunny.crashpoints import crash_point
from safebunny.errors import SafeBunnyOptionError
from safebunny.exactly_once.collect.batch import NewMessages
from safebunny.exactly_once.collect.materialize import LOCAL_ROWS, Materialized, from_frames, merge_all
from safebunny.exactly_once.outcome import FailedRow, StepContext
from safebunny.spark.exceptions import raised_in_python

__all__ = ["bisect", "describe", "run_frames"]

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


K = TypeVar("K")
R = TypeVar("R")


@dataclass
class Isolation(Generic[K, R]):
    """The results of the chunks that ran, and the keys that failed with their reasons."""

    results: list[R] = field(default_factory=list)
    failed: dict[K, tuple[str, str]] = field(default_factory=dict)  # key -> (error type, reason)
    jobs: int = 0


def describe(exc: BaseException, limit: int = 1500) -> tuple[str, str]:
    """(error type, a one-paragraph reason) for an exception, Python and Spark errors alike. For an error a
    UDF raised in a Python worker (Spark's ``PythonException``) the type is the class the UDF raised
    (``ValueError``), so ``Retry(poison_on=("ValueError",))`` matches it."""
    text = str(exc).strip()
    error_type = type(exc).__name__
    # Spark wraps the worker's traceback; keep its last line, which says what
    if "Traceback (most recent call last)" in text:
        raised = raised_in_python(text)
        lines = [ln for ln in text.splitlines() if ln.strip()]
        text = next((ln for ln in reversed(lines) if not ln.startswith((" ", "\t", "at "))), lines[-1])
        if raised is not None:  # the class is the error type: the reason is its message, as for a row handler
            error_type = raised[0]
            qualified = text.split(": ", 1)[0]
            if ": " in text and qualified.rsplit(".", 1)[-1] == error_type:
                text = text.split(": ", 1)[1]
    return error_type, text[:limit]


def bisect(keys: Sequence[K], run: Callable[[Sequence[K]], R], max_jobs: int = 64,
           fatal: Callable[[BaseException], bool] = lambda exc: False) -> Isolation[K, R]:
    """Run ``run(keys)``; on failure split the keys in halves and recurse, using at most ``max_jobs`` calls
    (docs/exactly-once.md, "Failing rows never wedge a step"); when the budget runs out, the keys of every chunk
    still failing are failed together. An error for which ``fatal(exc)`` is true is re-raised at once."""
    out: Isolation[K, R] = Isolation()
    pending: list[Sequence[K]] = [list(keys)] if keys else []
    while pending:
        chunk = pending.pop(0)
        out.jobs += 1
        try:
            out.results.append(run(chunk))
            continue
        except Exception as exc:  # noqa: BLE001 - any failure of the handler's job is isolated
            if fatal(exc):
                raise
            error = describe(exc)
        if len(chunk) == 1 or out.jobs + len(pending) + 2 > max_jobs:
            reason = error[1] if len(chunk) == 1 else (
                f"{error[1]} (failed in a group of {len(chunk)} rows: the isolation budget of {max_jobs} "
                "sub-jobs was spent; raise maxIsolationJobs to isolate further)")
            for key in chunk:
                out.failed[key] = (error[0], reason)
            continue
        half = len(chunk) // 2
        pending[:0] = [chunk[:half], chunk[half:]]
    return out
