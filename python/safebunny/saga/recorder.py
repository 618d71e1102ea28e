"""The ``foreachBatch`` function of a saga step's query: the exactly-once step, then its report stored.

:func:`batch_function` runs the step's :class:`safebunny.Step` (whose ``on_failed``, the saga's
:class:`~safebunny.saga.failures.FailureRouter`, routes failed rows and says how many it retried and parked)
and stores each batch's :class:`~safebunny.exactly_once.protocol.report.BatchReport` in the step's
:class:`~safebunny.saga.reports.ReportStore`, once per (epoch, batch id), in whichever process runs the batch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from safebunny.errors import SafeBunnyError, SafeBunnyPlanError
from safebunny.saga.config import SagaRunner
from safebunny.saga.definition import SagaStep
from safebunny.spark.exceptions import is_plan_error, raised_in_python
from safebunny.spark.log_levels import quiet_query_context

__all__ = ["StepRecorder"]


class StepRecorder:
    """Stores one saga step's batch reports; ``runtime`` is the step's exactly-once Step."""

    def __init__(self, saga: SagaRunner, step: SagaStep, runtime: Any) -> None:
        self.store = saga.config.layout.reports(step.unit_label)
        self.driver = saga.config.layout.driver
        self.runtime = runtime

    def process(self, batch_df: Any, batch_id: int, handler: Callable[..., Any], rows: bool) -> Any:
        """Run the batch through the step, then store its report (a batch without messages is not stored)."""
        report = self.runtime.process(batch_df, batch_id, handler, rows=rows)
        if report.received:
            self.store.record(report, self.driver)
        return report


def batch_function(saga: SagaRunner, step: SagaStep) -> Callable[[Any, int], None]:
    """The function for ``writeStream.foreachBatch`` of saga step ``step``."""
    recorder = StepRecorder(saga, step, saga.runtime(step))
    handler = saga.handler_of(step)

    def run(batch_df: Any, batch_id: int) -> None:
        try:
            with quiet_query_context():  # a plan error is raised again as one line below
                recorder.process(batch_df, batch_id, handler, step.rows)
        except SafeBunnyError:
            raise
        except Exception as exc:
            if not is_plan_error(exc):
                raise
            raise plan_error(saga.config.name, step, exc) from exc  # one line naming the cause, found by error_of

    run.__name__ = f"safebunny_saga_step_{step.node}_{step.consumes}"
    return run


def plan_error(saga_name: str, step: SagaStep, exc: BaseException) -> SafeBunnyPlanError:
    """Spark's plan error in step ``step``'s handler as one line: which handler, Spark's own first line (the
    unknown column and its suggestions, the mismatched types) and what to do."""
    raised = raised_in_python(exc)
    cause = (f"{raised[0]}: {raised[1]}" if raised is not None
             else f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0]}")
    handler = getattr(step.handler, "__name__", "handler")
    return SafeBunnyPlanError(
        f"saga {saga_name!r} step {step.unit_label} (handler {handler}, schema {step.schema!r}): Spark refused the "
        f"handler's plan: {' '.join(cause.split())} This fails every batch, so the step is not restarted: fix the "
        "handler (or the step's schema=) and run the saga again.")
