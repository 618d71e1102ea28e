"""The ``foreachBatch`` function of a saga step's query: the exactly-once step, then its counters recorded.

:func:`batch_function` wraps the step's :class:`safebunny.Step`: its ``on_failed`` callback (which routes
failed rows to retry or poison) is followed by a tally of where each row went, and after the batch its
counters go to the step's :class:`~safebunny.saga.status_log.StatusLog`, once per (epoch, batch id).
"""

from __future__ import annotations

import weakref
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from safebunny.errors import SafeBunnyError, SafeBunnyPlanError
from safebunny.saga.definition import SagaStep
from safebunny.saga.parked_ids import ParkedIds, drop_fresh_copies
from safebunny.saga.retry import decide
from safebunny.saga.status_log import BatchCounts, StatusLog
from safebunny.spark_errors import is_plan_error, raised_in_python
from safebunny.spark_logs import quiet_query_context

__all__ = ["StepRecorder", "batch_function", "counts_of", "plan_error"]

_RECORDERS: weakref.WeakKeyDictionary[Any, StepRecorder] = weakref.WeakKeyDictionary()


def counts_of(report: Any, retried: int, parked: int) -> BatchCounts:
    """A :class:`BatchCounts` from a step's ``BatchReport`` (the one place that reads its field names)."""
    return BatchCounts(report.received, report.processed, report.duplicates, report.failed, retried, parked,
                       report.emitted, report.seconds, report.finished_at)


class StepRecorder:
    """Counts one saga step's batches into its status log; ``runtime`` is the step's exactly-once Step."""

    def __init__(self, saga: Any, step: SagaStep, runtime: Any) -> None:
        self.log = StatusLog(saga.root, step.unit_label)
        self.driver = getattr(saga, "driver", None)
        self.retry = saga.retry
        self.runtime = runtime
        self._route = runtime.on_failed
        self._tally: Counter[str] = Counter()
        self.parked_ids = ParkedIds(saga.root, step.unit_label)
        runtime.on_failed = self._on_failed

    def _on_failed(self, rows: list[Any], ctx: Any) -> None:
        if self._route is not None:
            self._route(rows, ctx)  # published (confirmed) first: a tally never counts an unsent row
        parked = []
        for row in rows:
            headers = dict((row.row or {}).get("headers") or {})
            to_poison = decide(self.retry, headers, row.error_type).target == "poison"
            self._tally["parked" if to_poison else "retried"] += 1
            if to_poison:
                parked.append(row.message_id)
        self.parked_ids.add(parked)  # after the poison copies were confirmed

    def process(self, batch_df: Any, batch_id: int, handler: Callable[..., Any], rows: bool) -> Any:
        """Run the batch through the step, then count it (a batch without messages is not counted). A fresh
        copy of a message the step parked (:mod:`safebunny.saga.parked_ids`) is a duplicate."""
        self._tally.clear()
        batch_df, copies = drop_fresh_copies(batch_df, self.parked_ids.read())
        report = self.runtime.process(batch_df, batch_id, handler, rows=rows)
        if report.received or copies:
            counts = counts_of(report, self._tally["retried"], self._tally["parked"])
            counts = replace(counts, received=counts.received + copies, duplicates=counts.duplicates + copies)
            self.log.record(report.epoch, report.batch_id, counts, self.driver)
        return report


def batch_function(saga: Any, step: SagaStep) -> Callable[[Any, int], None]:
    """The function for ``writeStream.foreachBatch`` of saga step ``step``."""
    runtime = saga.runtime(step)
    recorder = _RECORDERS.get(runtime)
    if recorder is None:
        recorder = _RECORDERS[runtime] = StepRecorder(saga, step, runtime)
    handler = saga._handler_of(step)

    def run(batch_df: Any, batch_id: int) -> None:
        try:
            with quiet_query_context():  # a plan error is raised again as one line below
                recorder.process(batch_df, batch_id, handler, step.rows)
        except SafeBunnyError:
            raise
        except Exception as exc:
            if not is_plan_error(exc):
                raise
            raise plan_error(saga, step, exc) from exc  # one line naming the cause, found by error_of

    run.__name__ = f"safebunny_saga_step_{step.node}_{step.consumes}"
    return run


def plan_error(saga: Any, step: SagaStep, exc: BaseException) -> SafeBunnyPlanError:
    """Spark's plan error in step ``step``'s handler as one line: which handler, Spark's own first line (the
    unknown column and its suggestions, the mismatched types) and what to do."""
    raised = raised_in_python(exc)
    cause = (f"{raised[0]}: {raised[1]}" if raised is not None
             else f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0]}")
    handler = getattr(step.handler, "__name__", "handler")
    return SafeBunnyPlanError(
        f"saga {saga.name!r} step {step.unit_label} (handler {handler}, schema {step.schema!r}): Spark refused the "
        f"handler's plan: {' '.join(cause.split())} This fails every batch, so the step is not restarted: fix the "
        "handler (or the step's schema=) and run the saga again.")
