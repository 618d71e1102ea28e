"""One saga step's streaming query, its source, how it starts (a processing-time interval or availableNow),
and how its failures are told apart (a plan error is not worth a restart; a query whose Python process Spark
could not start in time never ran). :mod:`~safebunny.saga.run.runner` and :mod:`~safebunny.saga.run.drain` start
queries through here.

Its ``foreachBatch`` function (:func:`batch_function`) runs the step's :class:`safebunny.Step` (whose
``on_failed``, the saga's :class:`~safebunny.saga.run.failures.FailureRouter`, routes failed rows and says how many
it retried and parked) and stores each batch's :class:`~safebunny.exactly_once.protocol.report.BatchReport` in
the step's :class:`~safebunny.saga.run.reports.ReportStore`, once per (epoch, batch id), in whichever process runs
the batch.

Every step's query is named ``<saga>.<node>.<type>`` and keeps its checkpoint and journal under the
saga's root (``checkpoints/<node>.<type>``, ``journal/<node>.<type>``), so a restart, or the next
``drain``, goes on where the last one stopped (the same epoch, the same inbox rows).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from safebunny.errors import SafeBunnyError, SafeBunnyPlanError, moved_names
from safebunny.options import duration_ms
from safebunny.options.source import SourceOptions
from safebunny.saga.define import topology
from safebunny.saga.define.config import SagaRunner, SagaShape
from safebunny.saga.define.definition import SagaStep
from safebunny.saga.run.reports import ReportStore
from safebunny.spark import first_stream
from safebunny.spark.exceptions import error_of, is_plan_error, message_of, raised_in_python
from safebunny.spark.log_levels import note_streaming_started, quiet_query_context
from safebunny.spark.session import activate, read_stream

__all__ = ["source_frame", "source_options", "start_query", "is_entry", "is_available_now",
           "NotStarted", "try_start", "not_worth_a_restart",
           "note_serialization_race", "note_restart", "batch_function", "StepRecorder"]
#: this module's names of earlier releases that moved (CHANGELOG.md)
__getattr__ = moved_names(__name__, {
    "interval_ms": "write safebunny.options.duration_ms(trigger), the one duration parser (it reads the same "
                   "intervals, and days).",
    "WORKER_START_TRIES": "read safebunny.saga.run.worker_starts.TRIES (the one policy for queries that never "
                          "started, the supervisor's and a drain's).",
    "WORKER_START_WAIT_S": "read safebunny.saga.run.worker_starts.WAIT_S (the one policy for queries that never "
                           "started, the supervisor's and a drain's)."})

log = logging.getLogger("safebunny.saga")


def is_available_now(trigger: str | None) -> bool:
    """Whether ``trigger`` asks for availableNow rounds (``"availableNow"``, any case, ``-``/``_`` ignored)."""
    return trigger is not None and trigger.replace("-", "").replace("_", "").lower() == "availablenow"


def source_frame(spark: Any, saga: SagaShape, step: SagaStep, trigger: str | None = None,
                 await_file: str | None = None) -> Any:
    """The streaming DataFrame of step ``step``'s queue."""
    activate(spark)
    return read_stream(spark, **source_options(saga, step, trigger, await_file).spark_options())


def source_options(saga: SagaShape, step: SagaStep, trigger: str | None = None,
                   await_file: str | None = None) -> SourceOptions:
    """The source options of step ``step``'s query. The password goes in the ``password`` option (``saga.uri``
    holds none), which Spark redacts in query plans; ``connectionName`` names the saga, driver, step or shard and
    role, so the broker's connection list says whose consumer a connection is. ``await_file``: an availableNow
    run's ``availableNowAwaitFile`` (a drain's, for a step fed by other steps)."""
    config, layout = saga.config, saga.config.layout
    interval = None if trigger is None else duration_ms(trigger)
    # only an entry step is paced, by its source, under a zero trigger (docs/sagas.md, "Running")
    paced = interval is not None and is_entry(saga, step)
    return SourceOptions(
        config.connection.named(config.connection_name("consumer", step.unit_label)),
        queue=topology.consumer_queue(config, step.node, step.consumes, step.shard),
        queue_type="quorum" if config.settings.quorum else "classic", include_headers=True,
        journal_location=layout.journal(step.unit_label), max_messages_per_trigger=step.batch_size,
        pause_file=layout.pause_file(step.node, step.consumes), available_now_await_file=await_file,
        min_batch_interval_ms=max(1, int(interval)) if paced and interval is not None else 0,
        # a shard's queue has a single active consumer: never cancel and re-consume
        single_active_consumer=step.shard is not None)


def is_entry(saga: SagaShape, step: SagaStep) -> bool:
    """Whether ``step``'s messages come from outside the saga (``saga.start``, a producer of yours), not from
    another step's emits."""
    return not any(other.node == step.from_node for other in saga.steps)


def start_query(spark: Any, saga: SagaRunner, step: SagaStep, trigger: str | None,
                await_file: str | None = None) -> Any:
    """Start step ``step``'s query (``trigger`` a processing-time interval, or ``None`` for availableNow, which
    then ends no sooner than ``await_file`` is there)."""
    writer = (source_frame(spark, saga, step, trigger, await_file).writeStream
              .foreachBatch(batch_function(saga, step))  # stores each report wherever it runs (Connect: the server)
              .option("checkpointLocation", saga.config.layout.checkpoint(step.unit_label))
              .queryName(f"{saga.config.name}.{step.unit_label}"))
    if trigger is None:
        writer = writer.trigger(availableNow=True)
    else:
        # the source paces the batches instead (see source_frame): interval triggers put the hops in lockstep
        writer = writer.trigger(processingTime="0 seconds" if duration_ms(trigger) is not None else trigger)
    query = first_stream.start(spark, writer)  # a new driver's first query alone: see safebunny.spark.first_stream
    note_streaming_started(spark)
    return query


class StepRecorder:
    """Stores one saga step's batch reports; ``runtime`` is the step's exactly-once Step."""

    def __init__(self, saga: SagaRunner, step: SagaStep, runtime: Any) -> None:
        self.store = ReportStore(saga.config.layout.root, step.unit_label)
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


def not_worth_a_restart(error: BaseException) -> bool:
    """A plan error (an unknown column, a type mismatch in a handler) fails every restart the same way."""
    return isinstance(error_of(error), SafeBunnyPlanError) or is_plan_error(error)


def note_serialization_race(saga: SagaShape, step: SagaStep, error: BaseException | None) -> None:
    """One more line when a step failed in Spark's task serialisation on a collection that changed size: with
    every start through :func:`start_query` the source's shared map no longer does, so say what it is."""
    if error is not None and first_stream.is_serialization_race(error):
        log.warning("saga %s: step %s: Spark could not serialise a task because a collection in it changed size "
                    "meanwhile (the map Spark shares between the queries of format('safebunny'), see "
                    "safebunny.spark.first_stream: were queries of this format started elsewhere at the same time?); "
                    "if it repeats in this driver, start a new driver", saga.config.name, step.unit_label)


def note_restart(saga: SagaShape, label: str, error: BaseException | None) -> None:
    """Count a restart of query ``label`` under the saga's root (:class:`~safebunny.saga.run.reports.RestartLog`), for
    views in any process; a storage error here is logged, never raised (it only feeds a display)."""
    from safebunny.saga.run.reports import RestartLog

    try:
        RestartLog(saga.config.layout.root, label).record(None if error is None else message_of(error))
    except Exception as exc:  # noqa: BLE001 - a display record must not stop a supervisor
        log.warning("saga %s: could not record the restart of %s: %s", saga.config.name, label, exc)


def try_start(start: Callable[..., Any], *args: Any) -> Any:
    """``start(*args)``'s query, or a :class:`NotStarted` holding what it raised: a query that did not start counts
    as a failed one, restarted like one (over Spark Connect the server starts a Python process per query, which
    must connect back within Spark's fixed 10 s; a loaded server misses it now and then)."""
    try:
        return start(*args)
    except Exception as exc:  # noqa: BLE001 - a failed start is reported as the query's failure
        return NotStarted(exc)


class NotStarted:
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
