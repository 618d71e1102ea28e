"""``safebunny.Step``: one exactly-once step of a pipeline, run inside ``foreachBatch``.

Per micro-batch N of epoch E (the streaming query's id, stable across restarts from the same
checkpoint), following DESIGN.md's inbox protocol:

1. drop in-batch duplicates (first by the source's order);
2. new(N) = the messages whose id is not ``done`` in this node's inbox within the window, leaving
   out the rows (E, N) itself wrote, so a replay of N sees the same new(N);
3. run the handler on new(N) and collect its outcome (rows that make it fail are isolated);
4. unless (E, N) is recorded already: apply each Delta effect with app transaction (E, N), then
   append new(N) to the inbox as the batch's marker;
5. publish every emit with ids derived from the causes, on every attempt (the next inbox drops
   copies), and hand failed rows to ``on_failed``;
6. return: Spark commits the batch and the source acks it.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections import defaultdict, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa

from safebunny.crashpoints import crash_point
from safebunny.errors import SafeBunnyError, SafeBunnyOptionError
from safebunny.exactly_once.context import StepContext
from safebunny.exactly_once.effects import apply_effect, effect_app_id
from safebunny.exactly_once.emits import build_publish_rows
from safebunny.exactly_once.inbox import DEFAULT_WINDOW, Inbox, InboxRow
from safebunny.exactly_once.isolate import bisect, describe
from safebunny.exactly_once.materialize import (
    Materialized,
    decisions_to_materialized,
    from_frames,
    from_rows,
    merge_all,
)
from safebunny.exactly_once.outcome import Emit, FailedRow, Outcome
from safebunny.exactly_once.outcome_log import OutcomeLog
from safebunny.session import activate

__all__ = ["Step", "BatchReport", "Handler", "Router"]

log = logging.getLogger("safebunny.step")
SEQ = "_safebunny_seq"
QUERY_ID_PROPERTY = "sql.streaming.queryId"
Handler = Callable[[Any, StepContext], "Outcome | None"]
#: (emit) -> (exchange, routing key); a saga routes by node and type.
Router = Callable[[Emit], "tuple[str, str]"]
FailedCallback = Callable[[list[FailedRow], StepContext], None]


@dataclass(frozen=True)
class BatchReport:
    """What one batch did (``Step.reports`` keeps the recent ones)."""

    node: str
    epoch: str
    batch_id: int
    received: int
    duplicates_in_batch: int
    duplicates_in_inbox: int
    processed: int
    failed: int
    emitted: int
    replayed: bool
    seconds: float
    finished_at: dt.datetime


class Step:
    """An exactly-once step: ``query = df.writeStream.foreachBatch(step.foreach_batch(handler))...``.

    - ``node``: the step's node name (in the inbox partition and in derived ids);
    - ``inbox``: the path of the inbox Delta table (may be shared by many nodes);
    - ``uri``/``password``: the broker for emits (``password`` keeps the secret out of the URI);
    - ``window``: the dedupe window (default 7 days): a duplicate arriving later is not caught;
    - ``row_retries``: in-place retries of a failing row in a row handler before it is failed;
    - ``max_isolation_jobs``: sub-jobs allowed to isolate failing rows of a DataFrame handler;
    - ``on_failed(rows, ctx)``: receives the failed rows of each batch, before it commits;
    - ``router``: (emit) -> (exchange, routing key) for emits without an explicit routing key;
    - ``publish_options``: extra sink options for emits (e.g. ``confirmTimeoutMs``).
    """

    def __init__(self, node: str, inbox: str, uri: str | None = None, password: str | None = None, *,
                 window: dt.timedelta = DEFAULT_WINDOW, row_retries: int = 2, max_isolation_jobs: int = 64,
                 on_failed: FailedCallback | None = None, router: Router | None = None,
                 publish_options: Mapping[str, str] | None = None, epoch: str | None = None) -> None:
        self.inbox = Inbox(inbox, node, window)
        self.node = node
        self.uri = uri
        self.password = password
        if row_retries < 0 or max_isolation_jobs < 1:
            raise SafeBunnyOptionError(
                f"row_retries must be >= 0 and max_isolation_jobs >= 1; got {row_retries} and {max_isolation_jobs}.",
                "row_retries")
        self.row_retries = row_retries
        self.max_isolation_jobs = max_isolation_jobs
        self.on_failed = on_failed
        self.router = router
        self.publish_options = dict(publish_options or {})
        self.fixed_epoch = epoch
        self.outcomes = OutcomeLog(inbox, node)
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
        """Run one batch through the protocol (what the ``foreach_batch`` function calls)."""
        started = time.monotonic()
        spark = activate(batch_df.sparkSession)
        epoch = self._epoch(spark)
        ctx = StepContext(self.node, batch_id, epoch)
        df = batch_df.withColumn(SEQ, _seq_column()).persist()
        try:
            meta = _meta(df)
            crash_point("step.after_consume")
            first: dict[str, dict[str, Any]] = {}
            for m in meta:
                first.setdefault(m["messageId"], m)
            seen = self.inbox.seen(list(first), epoch, batch_id)
            new = [m for mid, m in first.items() if mid not in seen]
            replayed = self.inbox.batch_done(epoch, batch_id)
            if rows:
                result = self._run_rows(df, new, handler, ctx)
            else:
                result = self._run_frames(df, new, handler, ctx)
            correlation_of = {m["messageId"]: m["correlationId"] for m in new}
            publish, emitted = self._publish_rows(result, correlation_of)
            if not replayed:
                for key in sorted(result.effects, key=repr):
                    effect, table = result.effects[key]
                    apply_effect(spark, effect, table, effect_app_id(self.node, epoch, effect), batch_id)
                crash_point("step.after_effects")
                self.inbox.record(self._inbox_rows(new, result, emitted), epoch, batch_id)
            crash_point("step.after_inbox")
            if publish.num_rows:
                self._publish(spark, publish)
            crash_point("step.after_publish")
            failed = [self._with_row(df, f, first) for f in result.failed.values()]
            if failed and self.on_failed is not None:
                self.on_failed(failed, ctx)
            if rows:
                self.outcomes.forget_before(epoch, batch_id)
        finally:
            df.unpersist()
        report = BatchReport(self.node, epoch, batch_id, len(meta), len(meta) - len(first), len(seen),
                             len(new) - len(result.failed), len(result.failed), publish.num_rows, replayed,
                             time.monotonic() - started, dt.datetime.now(dt.timezone.utc))
        self.reports.append(report)
        log.info("step %s batch %d: %d received, %d duplicate in batch, %d already processed, %d processed, "
                 "%d failed, %d emitted%s", self.node, batch_id, report.received, report.duplicates_in_batch,
                 report.duplicates_in_inbox, report.processed, report.failed, report.emitted,
                 " (replay)" if replayed else "")
        return report

    # -- handler runs ----------------------------------------------------------------------------
    def _run_frames(self, df: Any, new: list[dict[str, Any]], handler: Handler, ctx: StepContext) -> Materialized:
        if not new:
            return Materialized()
        spark = df.sparkSession

        def run(seqs: Any) -> Materialized:
            keys = spark.createDataFrame([(s,) for s in seqs], f"{SEQ} long")
            subset = df.join(keys.hint("broadcast"), SEQ, "left_semi").drop(SEQ)
            crash_point("step.in_handler")
            return from_frames(handler(subset, ctx))

        isolation = bisect([m[SEQ] for m in new], run, self.max_isolation_jobs, fatal=_is_plan_error)
        result = merge_all(isolation.results)
        by_seq = {m[SEQ]: m for m in new}
        for seq, (error_type, reason) in isolation.failed.items():
            m = by_seq[seq]
            result.failed[m["messageId"]] = FailedRow(m["messageId"], reason, 1, m["correlationId"], error_type)
        if isolation.failed:
            log.warning("step %s batch %d: %d of %d rows failed in the handler and were isolated (%d sub-jobs)",
                        self.node, ctx.batch_id, len(isolation.failed), len(new), isolation.jobs)
        return result

    def _run_rows(self, df: Any, new: list[dict[str, Any]], handler: Handler, ctx: StepContext) -> Materialized:
        if not new:
            return Materialized()
        decisions = self.outcomes.read(ctx.epoch, ctx.batch_id)
        if decisions is None:
            decisions = {}
            for row in _full_rows(df, new):
                mid = row["messageId"]
                decisions[mid] = self._decide(handler, row, ctx.for_message(mid, row.get("correlationId")))
            crash_point("step.in_handler")
            self.outcomes.write(ctx.epoch, ctx.batch_id, decisions)
        result = decisions_to_materialized(decisions)
        correlation = {m["messageId"]: m["correlationId"] for m in new}
        for mid, failed in list(result.failed.items()):
            result.failed[mid] = FailedRow(mid, failed.reason, failed.attempts, correlation.get(mid), failed.error_type)
        return result

    def _decide(self, handler: Handler, row: dict[str, Any], ctx: StepContext) -> dict[str, Any]:
        attempts = self.row_retries + 1
        for attempt in range(1, attempts + 1):
            try:
                return from_rows(row["messageId"], handler(row, replace(ctx, attempt=attempt)))
            except SafeBunnyOptionError:
                raise
            except Exception as exc:  # noqa: BLE001 - a failing row is retried, then failed with its reason
                error_type, reason = describe(exc)
                if attempt < attempts:
                    time.sleep(min(0.05 * 2 ** attempt, 1.0))
        return {"ok": False, "reason": reason, "error_type": error_type, "attempts": attempts}

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
        from safebunny.exactly_once.emits import PUBLISH_SCHEMA

        return (pa.concat_tables(tables) if tables else PUBLISH_SCHEMA.empty_table()), emitted

    def _route(self, item: Emit) -> tuple[str, str]:
        if item.routing_key is not None:
            return item.exchange or "", item.routing_key
        if self.router is not None:
            return self.router(item)
        raise SafeBunnyOptionError(
            f"emit(type={item.type!r}) has no routing_key, and step {self.node!r} has no router. Give "
            "emit(..., exchange=..., routing_key=...), or run the step inside a safebunny.Saga.", "routing_key")

    def _publish(self, spark: Any, rows: pa.Table) -> None:
        if not self.uri:
            raise SafeBunnyOptionError(f"Step {self.node!r} emits messages but has no uri; pass Step(uri=...).", "uri")
        options = {"uri": self.uri, **self.publish_options}
        if self.password is not None:
            options["password"] = self.password
        spark.createDataFrame(rows).write.format("safebunny").mode("append").options(**options).save()

    def _inbox_rows(self, new: list[dict[str, Any]], result: Materialized,
                    emitted: Mapping[str, list[str]]) -> list[InboxRow]:
        out = []
        for m in new:
            mid = m["messageId"]
            failed = result.failed.get(mid)
            out.append(InboxRow(mid, m["correlationId"], m["causationId"],
                                "failed" if failed else "done", failed.reason if failed else None,
                                failed.attempts if failed else 1, tuple(emitted.get(mid, ())), m["type"]))
        return out

    def _with_row(self, df: Any, failed: FailedRow, first: Mapping[str, dict[str, Any]]) -> FailedRow:
        if failed.row is not None or self.on_failed is None:
            return failed
        seq = first.get(failed.message_id, {}).get(SEQ)
        if seq is None:
            return failed
        rows = _full_rows(df, [{SEQ: seq}])
        return FailedRow(failed.message_id, failed.reason, failed.attempts, failed.correlation_id,
                         failed.error_type, rows[0] if rows else None)

    def _epoch(self, spark: Any) -> str:
        epoch = spark.sparkContext.getLocalProperty(QUERY_ID_PROPERTY) or self.fixed_epoch
        if not epoch:
            raise SafeBunnyError(
                f"Step {self.node!r} runs outside a streaming query, so it has no epoch (the query id kept in "
                "the checkpoint). Run it through writeStream.foreachBatch, or pass Step(..., epoch=...).")
        return epoch


def _seq_column() -> Any:
    from pyspark.sql import functions as F

    return F.monotonically_increasing_id()


def _meta(df: Any) -> list[dict[str, Any]]:
    from pyspark.sql import functions as F

    if "messageId" not in df.columns:
        raise SafeBunnyOptionError(
            f"A step reads safebunny's source rows, which have a 'messageId' column; got columns {df.columns}.",
            "messageId")
    causation = (F.col("headers").getItem("x-causation-id") if "headers" in df.columns else F.lit(None)).cast("string")
    correlation = F.col("correlationId") if "correlationId" in df.columns else F.lit(None).cast("string")
    message_type = F.col("type") if "type" in df.columns else F.lit(None).cast("string")
    table = df.select(SEQ, "messageId", correlation.alias("correlationId"), causation.alias("causationId"),
                      message_type.alias("type")).toArrow().sort_by(SEQ)
    rows = table.to_pylist()
    missing = [r for r in rows if r["messageId"] is None]
    if missing:
        raise SafeBunnyError(
            f"{len(missing)} message(s) of this batch have no message id, so they cannot be deduplicated. Publish "
            "with a message_id property (the safebunny sink always sets one), or set one upstream.")
    return rows


def _full_rows(df: Any, subset: list[dict[str, Any]]) -> list[dict[str, Any]]:
    spark = df.sparkSession
    keys = spark.createDataFrame([(m[SEQ],) for m in subset], f"{SEQ} long")
    table = df.join(keys.hint("broadcast"), SEQ, "left_semi").toArrow().sort_by(SEQ).drop_columns([SEQ])
    return table.to_pylist()


def _is_plan_error(exc: BaseException) -> bool:
    """Errors in the handler's plan (a bad column, a wrong return) fail the query instead of the rows."""
    if isinstance(exc, SafeBunnyOptionError):
        return True
    try:
        from pyspark.errors import AnalysisException
    except ImportError:  # pragma: no cover - pyspark is a dependency
        return False
    return isinstance(exc, AnalysisException)
