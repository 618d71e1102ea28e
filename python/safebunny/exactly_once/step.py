"""``safebunny.Step``: one exactly-once step of a pipeline, run inside ``foreachBatch``.

Per micro-batch N of epoch E (the streaming query's id, stable across restarts from the same
checkpoint), following DESIGN.md's inbox protocol:

1. drop in-batch duplicates (first by the source's order);
2. new(N) = the messages whose id is not ``done`` in this node's inbox within the window, leaving
   out the rows (E, N) itself wrote, so a replay of N sees the same new(N);
3. run the handler on new(N) and collect its outcome (rows that make it fail are isolated);
4. unless (E, N) is recorded already: write the batch's claim (its ids and effect targets), apply
   each Delta effect with app transaction (E, N), leaving out rows that an orphaned claim of another
   epoch already applied (:mod:`~safebunny.exactly_once.claims`);
5. publish every emit with ids derived from the causes (on the driver), on every attempt (the next inbox
   drops copies), from the driver or, for a large batch, from the executors, every message confirmed before
   going on; and hand failed rows to ``on_failed``;
6. unless (E, N) is recorded already: append new(N) to the inbox as the batch's marker and remove the
   claim. The marker comes after the publish: a crash between the two, then a redelivery to another
   epoch (a new checkpoint, another driver) finds the messages not done and publishes again; the other
   order found them done and never published their outputs;
7. return: Spark commits the batch and the source acks it.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections import defaultdict, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa

from safebunny.crashpoints import crash_point
from safebunny.errors import SafeBunnyError, SafeBunnyOptionError
from safebunny.exactly_once.batch import Batch, NewMessages, Prepared
from safebunny.exactly_once.claims import Claim, ClaimLog, applied_ids
from safebunny.exactly_once.connect_epoch import connect_epoch, is_connect
from safebunny.exactly_once.context import StepContext
from safebunny.exactly_once.decisions import DecisionTable
from safebunny.exactly_once.emit_publisher import EmitPublisher, Published
from safebunny.exactly_once.emits import PUBLISH_SCHEMA, build_publish_rows
from safebunny.exactly_once.executor_publish import AUTO, DEFAULT_PARTITION_ROWS
from safebunny.exactly_once.fence import FenceMoved
from safebunny.exactly_once.inbox import DEFAULT_WINDOW, Inbox, InboxRow
from safebunny.exactly_once.isolate import bisect
from safebunny.exactly_once.local_collect import LOCAL_ROWS
from safebunny.exactly_once.materialize import Materialized, from_frames, merge_all
from safebunny.exactly_once.outcome import Effect, Emit, FailedRow, Outcome
from safebunny.exactly_once.outcome_log import OutcomeLog
from safebunny.exactly_once.row_run import RowRun
from safebunny.exactly_once.settle import settle_outcome
from safebunny.exactly_once.takeover import Takeover
from safebunny.session import activate

__all__ = ["Step", "BatchReport", "Handler", "Router", "Prepare"]

log = logging.getLogger("safebunny.step")
QUERY_ID_PROPERTY = "sql.streaming.queryId"
#: plans of a batch's effects before it fails (another batch committing to its targets each time)
_FENCE_ATTEMPTS = 3
Handler = Callable[[Any, StepContext], "Outcome | None"]
#: (emit) -> (exchange, routing key); a saga routes by node and type.
Router = Callable[[Emit], "tuple[str, str | Callable[[str], str]]"]
#: (failed rows, ctx) -> None, or how many of them it retried and parked (``{"retried": n, "parked": m}``)
FailedCallback = Callable[[list[FailedRow], StepContext], "Mapping[str, int] | None"]
#: (the new messages' Arrow rows, their Spark schema) -> the handler's input, or None to hand the handler
#: the rows as they are
Prepare = Callable[[pa.Table, Any], "Prepared | None"]


@dataclass(frozen=True)
class BatchReport:
    """What one batch did (``Step.reports`` keeps the recent ones)."""

    node: str
    epoch: str
    batch_id: int
    received: int
    duplicates: int  # dropped: copies within the batch plus messages already processed (as StepStatus counts)
    already_processed: int  # of those, the ones the inbox had processed before
    processed: int
    failed: int
    emitted: int
    replayed: bool
    seconds: float
    finished_at: dt.datetime
    #: seconds spent in each phase of the batch (read, dedupe, handler, effects, inbox, publish)
    phases: Mapping[str, float] = field(default_factory=dict)
    #: where the emits were published: "driver", "executors", or "" when the batch emitted nothing
    published_from: str = ""
    #: the partitions (publishing tasks) of an executor publish; 1 on the driver, 0 when nothing was published
    publish_partitions: int = 0
    #: publishing attempts (a broker failure republishes the same ids); 0 when nothing was published
    publish_attempts: int = 0
    #: of the failed, how many ``on_failed`` sent to a retry tier and parked, as it returned them (a saga step's)
    retried: int = 0
    parked: int = 0


class Step:
    """An exactly-once step: ``query = df.writeStream.foreachBatch(step.foreach_batch(handler))...``.

    - ``node``: the step's node name (in the inbox partition and in derived ids);
    - ``inbox``: the inbox Delta table (may be shared by many nodes): a path, written with delta-rs, or
      a table name when the session has Delta (``inbox_backend="spark"`` puts a path on Spark Delta too);
    - ``state``: where the step's claims, outcome logs and row decisions live (a path or URI); by default the
      inbox's folder, and required for an inbox given by table name
      (:func:`~safebunny.exactly_once.inbox.state_location`);
    - ``uri``/``password``: the broker for emits (``password`` keeps the secret out of the URI);
    - ``window``: the dedupe window (default 7 days): a duplicate arriving later is not caught;
    - ``row_retries``: in-place retries of a failing row in a row handler before it is failed;
    - ``max_isolation_jobs``: sub-jobs allowed to isolate failing rows of a DataFrame handler;
    - ``on_failed(rows, ctx)``: receives the failed rows of each batch, before it commits; what it returns
      as ``{"retried": n, "parked": m}`` (a saga step's router) goes into the batch's report;
    - ``router``: (emit) -> (exchange, routing key) for emits without an explicit routing key;
    - ``publish_options``: extra sink options for emits (e.g. ``confirmTimeoutMs``);
    - ``publish_retry_seconds``: how long a batch keeps republishing its emits (the same ids) while the
      broker fails them, e.g. through a restart, before the batch fails (default 60 s);
    - ``executor_publish_rows``: a batch with more emitted messages than this publishes them from the
      executors through the sink, about ``executor_partition_rows`` (default 2,500) per task, instead of from
      the driver (0 or None: always from the driver). The default, ``"auto"``, is 5,000 where the executors
      are processes of their own (a cluster) and never on a ``local[...]`` session, where it only costs; see
      :mod:`~safebunny.exactly_once.executor_publish`;
    - ``checkpoint``: the query's ``checkpointLocation``; over Spark Connect the step reads its epoch (the
      query id) there; without it, from the batch (:mod:`~safebunny.exactly_once.connect_epoch`);
    - ``prepare``: for DataFrame handlers, ``prepare(arrow_rows, spark_schema)`` turns the new messages' rows into the
      handler's input on the driver (a :class:`~safebunny.exactly_once.batch.Prepared`: one row per
      message, plus the messages it rejects) before any Spark job, or returns None to pass the rows as
      they are; the handler's context then has ``prepared=True``. A saga parses bodies this way.
    """

    def __init__(self, node: str, inbox: str, uri: str | None = None, password: str | None = None, *,
                 window: dt.timedelta = DEFAULT_WINDOW, row_retries: int = 2, max_isolation_jobs: int = 64,
                 on_failed: FailedCallback | None = None, router: Router | None = None,
                 publish_options: Mapping[str, str] | None = None, epoch: str | None = None,
                 publish_retry_seconds: float = 60.0, inbox_backend: str = "auto",
                 checkpoint: str | None = None, prepare: Prepare | None = None, state: str | None = None,
                 executor_publish_rows: int | str | None = AUTO,
                 executor_partition_rows: int = DEFAULT_PARTITION_ROWS) -> None:
        self.inbox = Inbox(inbox, node, window, backend=inbox_backend, state=state)
        state = self.inbox.state  # before anything runs: a table name needs one
        self.node = node
        self.uri = uri
        self.password = password
        if row_retries < 0 or max_isolation_jobs < 1:
            raise SafeBunnyOptionError(
                f"row_retries must be >= 0 and max_isolation_jobs >= 1; got {row_retries} and {max_isolation_jobs}.",
                "row_retries")
        if (executor_publish_rows != AUTO and (not isinstance(executor_publish_rows, (int, type(None)))
                                               or (executor_publish_rows or 0) < 0)) or executor_partition_rows < 1:
            raise SafeBunnyOptionError(
                f"executor_publish_rows must be 'auto', a number >= 0 or None, and executor_partition_rows >= 1; got "
                f"{executor_publish_rows!r} and {executor_partition_rows!r}.", "executor_publish_rows")
        self.row_retries = row_retries
        self.max_isolation_jobs = max_isolation_jobs
        self.on_failed = on_failed
        self.router = router
        self.publish_options = dict(publish_options or {})
        self.publish_retry_seconds = publish_retry_seconds
        self.executor_publish_rows = executor_publish_rows
        self.executor_partition_rows = executor_partition_rows
        self._publisher: EmitPublisher | None = None
        self.fixed_epoch = epoch
        self.checkpoint = checkpoint
        self.prepare = prepare
        self.outcomes = OutcomeLog(state, node)
        self.claims = ClaimLog(state, node)
        self.decisions = DecisionTable(state, node)
        self._rows = RowRun(self.inbox, self.claims, self.outcomes, self.decisions, row_retries)
        self.reports: deque[BatchReport] = deque(maxlen=200)

    # -- public ----------------------------------------------------------------------------------
    def foreach_batch(self, handler: Handler, rows: bool = False) -> Callable[[Any, int], None]:
        """The function for ``writeStream.foreachBatch``. ``rows=True``: ``handler(message_dict, ctx)``
        is called per message (for calls to external services) instead of once per batch."""
        if not callable(handler):
            raise SafeBunnyOptionError(f"foreach_batch needs a callable handler; got {handler!r}.", "handler")

        def run(batch_df: Any, batch_id: int) -> None:
            self.process(batch_df, batch_id, handler, rows=rows)

        run.__name__ = f"safebunny_step_{self.node}"
        return run

    def process(self, batch_df: Any, batch_id: int, handler: Handler, rows: bool = False) -> BatchReport:
        """Run one batch through the protocol (what the ``foreach_batch`` function calls).

        The batch is collected to the driver once (one Spark job; its size is bounded by the source's
        ``maxMessagesPerTrigger``/``maxBytesPerTrigger``); the handler gets the new messages as a local
        DataFrame, so its effects and emits are cheap to compute and a failing row is isolated without
        reading the source again; emits are published with confirms from the driver, or from the executors
        when the batch has more than ``executor_publish_rows`` of them (``BatchReport.published_from``).
        """
        started = time.monotonic()
        clock = _Phases()
        spark = activate(batch_df.sparkSession)
        epoch = self._epoch(spark, batch_df, batch_id)
        ctx = StepContext(self.node, batch_id, epoch)
        batch = Batch.collect(batch_df, scope=f"{epoch}/{batch_id}")
        clock.lap("read")
        crash_point("step.after_consume")
        seen = self.inbox.seen(batch.first_ids(), epoch, batch_id)
        new = batch.new(seen)
        replayed = self.inbox.batch_done(epoch, batch_id)
        clock.lap("dedupe")
        if self.prepare is not None and not rows and new.count:
            prepared = self.prepare(new.table, new.schema)
            if prepared is not None:
                new, ctx = new.with_prepared(prepared), replace(ctx, prepared=True)
        if rows:
            result = self._rows.run(new.for_handler(), handler, ctx, replayed,
                                    lambda effects: self._apply(spark, ctx.epoch, batch_id, new, effects)[1])
        else:
            result = self._run_frames(spark, new.for_handler(), handler, ctx)
        handled = result
        result = settle_outcome(result, new.order(), new.rejected)
        clock.lap("handler")
        publish, emitted = self._publish_rows(result, new.correlation_of())
        clock.lap("ids")
        if not replayed:
            effects = {key: value for key, value in result.effects.items() if value[1].num_rows}
            claimed = bool(effects) or (rows and new.count > 0)
            orphans: list[Claim] = []
            if claimed:  # what this batch applies per target, and (row handlers) the ids it decided: before
                # listing the others, so of two batches on one id at least one sees the other's claim
                decided = [m for m in new.ids if m not in result.failed] if rows else []
                applied = applied_ids(handled.effects, effects, result.failed)
                if decided:  # the decision table's part, committed already (RowRun)
                    applied[self.decisions.effect.key] = set(decided)
                self.claims.write(epoch, batch_id, decided, applied)
                crash_point("step.after_claim")
                orphans, _ = self._apply(spark, epoch, batch_id, new, effects)
            clock.lap("effects")
            crash_point("step.after_effects")
        # the batch's messages go out before its inbox marker: once the marker is in, a copy of these messages
        # redelivered to another epoch (a new checkpoint, another driver) is a duplicate there and sends nothing
        published = Published("", 0, 0)
        if publish.num_rows:
            published = self._publish(spark, publish, f"step:{self.node}/{epoch}/{batch_id}")
            crash_point("step.after_publish")
        clock.lap("publish")
        routed: Mapping[str, int] | None = None
        if result.failed and self.on_failed is not None:
            routed = self.on_failed([replace(f, row=f.row or new.row_of(f.message_id))
                                     for f in result.failed.values()], ctx)
        routed = routed if isinstance(routed, Mapping) else {}
        clock.lap("failed")
        if not replayed:
            self.inbox.record(self._inbox_rows(new, result, emitted), epoch, batch_id)
            if claimed:
                self.claims.remove(epoch, batch_id)
            self._retire(orphans)
            clock.lap("inbox")
        crash_point("step.after_inbox")
        if rows:
            self.outcomes.forget_before(epoch, batch_id)
        report = BatchReport(self.node, epoch, batch_id, batch.received, batch.received - batch.distinct + len(seen),
                             len(seen), new.count - len(result.failed), len(result.failed), publish.num_rows,
                             replayed, time.monotonic() - started, dt.datetime.now(dt.timezone.utc), clock.laps,
                             published.where, published.partitions, published.attempts,
                             int(routed.get("retried", 0)), int(routed.get("parked", 0)))
        self.reports.append(report)
        log.info("step %s batch %d: %d received, %d duplicate in batch, %d already processed, %d processed, "
                 "%d failed, %d emitted%s%s in %.2f s (%s)", self.node, batch_id, report.received,
                 report.duplicates - report.already_processed, report.already_processed, report.processed,
                 report.failed, report.emitted, _published_from(published), " (replay)" if replayed else "",
                 report.seconds, ", ".join(f"{k} {v:.2f}" for k, v in clock.laps.items()))
        return report

    # -- handler runs ----------------------------------------------------------------------------
    def _run_frames(self, spark: Any, new: NewMessages, handler: Handler, ctx: StepContext) -> Materialized:
        if not new.count:
            return Materialized()

        def run(positions: Any) -> Materialized:
            subset = new.frame(spark, positions)
            crash_point("step.in_handler")
            return from_frames(handler(subset, ctx), local=len(positions) <= LOCAL_ROWS)

        isolation = bisect(list(range(new.count)), run, self.max_isolation_jobs, fatal=_is_plan_error)
        result = merge_all(isolation.results)
        for position, (error_type, reason) in isolation.failed.items():
            mid, correlation = new.ids[position], new.correlations[position]
            result.failed[mid] = FailedRow(mid, reason, 1, correlation, error_type)
        if isolation.failed:
            error_type, reason = next(iter(isolation.failed.values()))
            log.warning("step %s batch %d: %d of %d rows failed in the handler and were isolated (%d sub-jobs); "
                        "the first: %s: %s", self.node, ctx.batch_id, len(isolation.failed), new.count,
                        isolation.jobs, error_type, " ".join((reason or "").split())[:300])
        return result

    # -- outputs ---------------------------------------------------------------------------------
    def _publish_rows(self, result: Materialized, correlation_of: Mapping[str, str | None]
                      ) -> tuple[pa.Table, dict[str, list[str]]]:
        tables = []
        emitted: dict[str, list[str]] = defaultdict(list)
        for index, key in enumerate(sorted(result.emits, key=repr)):
            item, table = result.emits[key]
            exchange, routing_key = self._route(item)
            rows, ids = build_publish_rows(table, node=self.node, message_type=item.type, exchange=exchange,
                                           routing_key=routing_key, correlation_of=correlation_of,
                                           what=f"emit #{index} (type {item.type!r})")
            tables.append(rows)
            for cause, cause_ids in ids.items():
                emitted[cause].extend(cause_ids)
        return (pa.concat_tables(tables) if tables else PUBLISH_SCHEMA.empty_table()), emitted

    def _route(self, item: Emit) -> tuple[str, Any]:
        if item.routing_key is not None:
            return item.exchange or "", item.routing_key
        if self.router is not None:
            return self.router(item)
        raise SafeBunnyOptionError(
            f"emit(type={item.type!r}) has no routing_key, and step {self.node!r} has no router. Give "
            "emit(..., exchange=..., routing_key=...), or run the step inside a safebunny.Saga.", "routing_key")

    def _publish(self, spark: Any, rows: pa.Table, scope: str) -> Published:
        """Publish the batch's emits with confirms, from the driver or (a large batch) the executors; a broker
        failure is retried with the same ids, then fails the batch, which Spark replays after a restart."""
        if not self.uri:
            raise SafeBunnyOptionError(f"Step {self.node!r} emits messages but has no uri; pass Step(uri=...).", "uri")
        if self._publisher is None:  # one per step: it reads the session's "auto" threshold once
            self._publisher = EmitPublisher(self.node, self.uri, self.password, self.publish_options,
                                            retry_seconds=self.publish_retry_seconds,
                                            threshold=self.executor_publish_rows,
                                            partition_rows=self.executor_partition_rows)
        return self._publisher.publish(spark, rows, scope)

    def _inbox_rows(self, new: NewMessages, result: Materialized,
                    emitted: Mapping[str, list[str]]) -> list[InboxRow]:
        out = []
        columns = zip(new.ids, new.correlations, new.causations, new.types, strict=True)
        for mid, correlation, causation, message_type in columns:
            failed = result.failed.get(mid)
            out.append(InboxRow(mid, correlation, causation, "failed" if failed else "done",
                                failed.reason if failed else None, failed.attempts if failed else 1,
                                tuple(emitted.get(mid, ())), message_type))
        return out

    # -- claims: effects applied by a batch that never wrote its inbox marker ---------------------
    def _apply(self, spark: Any, epoch: str, batch_id: int, new: NewMessages,
               effects: Mapping[tuple, tuple[Effect, pa.Table]]) -> tuple[list[Claim], bool]:
        """Apply ``effects`` beside the node's other claims (:mod:`~safebunny.exactly_once.takeover`); when
        another batch commits to a target meanwhile, plan again from what landed. Returns the other claims,
        and whether another batch was met (:meth:`Takeover.apply`)."""
        takeover = Takeover(spark, self.node, epoch, batch_id)
        for attempt in range(1, _FENCE_ATTEMPTS + 1):
            orphans = self._orphans(epoch, batch_id)
            try:
                met = takeover.apply(effects, orphans, lambda: self.inbox.seen(new.ids, epoch, batch_id))
                return orphans, met
            except FenceMoved:
                if attempt == _FENCE_ATTEMPTS:
                    raise
                log.warning("step %s batch %d: another batch committed to a target this one planned against; "
                            "planning again (%d/%d)", self.node, batch_id, attempt, _FENCE_ATTEMPTS)
        raise AssertionError("unreachable")

    def _orphans(self, epoch: str, batch_id: int) -> list[Claim]:
        """The node's other claims whose batch never wrote its marker (stale ones removed), however old."""
        orphans = []
        for claim in self.claims.others(epoch, batch_id):
            if self.inbox.batch_done(claim.epoch, claim.batch_id):
                self.claims.remove(claim.epoch, claim.batch_id)
            else:  # kept until its ids are done: they may still be queued (a paused step, a long outage)
                orphans.append(claim)
        return orphans

    def _retire(self, orphans: list[Claim]) -> None:
        """Remove an orphaned claim once every id it holds is done in the inbox."""
        for claim in orphans:
            if len(self.inbox.seen(sorted(claim.ids), "", -1)) == len(claim.ids):
                self.claims.remove(claim.epoch, claim.batch_id)

    def _epoch(self, spark: Any, batch_df: Any = None, batch_id: int | None = None) -> str:
        if is_connect(spark):  # no sparkContext in a Connect foreachBatch process
            return connect_epoch(batch_df, batch_id, self.checkpoint, self.fixed_epoch, self.node)
        epoch = spark.sparkContext.getLocalProperty(QUERY_ID_PROPERTY) or self.fixed_epoch
        if not epoch:
            raise SafeBunnyError(
                f"Step {self.node!r} runs outside a streaming query, so it has no epoch (the query id kept in "
                "the checkpoint). Run it through writeStream.foreachBatch, or pass Step(..., epoch=...).")
        return epoch


class _Phases:
    """Seconds per phase of a batch, for :class:`BatchReport` and the log line."""

    def __init__(self) -> None:
        self.laps: dict[str, float] = {}
        self._last = time.monotonic()

    def lap(self, name: str) -> None:
        now = time.monotonic()
        self.laps[name] = round(self.laps.get(name, 0.0) + now - self._last, 4)
        self._last = now


def _published_from(published: Published) -> str:
    if not published.where:
        return ""
    where = (f"the executors, {published.partitions} partition(s)" if published.where == "executors"
             else "the driver")
    again = f", {published.attempts} attempts" if published.attempts > 1 else ""
    return f" (published from {where}{again})"


def _is_plan_error(exc: BaseException) -> bool:
    """Errors in the handler's plan (a bad column, a wrong return) fail the query instead of the rows."""
    if isinstance(exc, SafeBunnyOptionError):
        return True
    try:
        from pyspark.errors import AnalysisException
    except ImportError:  # pragma: no cover - pyspark is a dependency
        return False
    return isinstance(exc, AnalysisException)
