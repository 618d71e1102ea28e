"""One exactly-once step of a pipeline, run inside ``foreachBatch`` (``safebunny.Step``).

Per micro-batch N of epoch E (the streaming query's id, stable across restarts from the same
checkpoint), following DESIGN.md's inbox protocol:

1. drop in-batch duplicates (first by the source's order);
2. new(N) = the messages whose id is not ``done`` in this node's inbox within the window, leaving
   out the rows (E, N) itself wrote, so a replay of N sees the same new(N);
3. run the handler on new(N) and collect its outcome (rows that make it fail are isolated); a DataFrame handler's
   outcome is recorded before anything else, and a replay in any epoch takes the record instead
   (:mod:`~safebunny.exactly_once.handlers.frame_record`);
4. unless (E, N) is recorded already: write the batch's claim (its ids and effect targets), apply
   each Delta effect with app transaction (E, N), leaving out rows that an orphaned claim of another
   epoch already applied (:mod:`~safebunny.exactly_once.claims.log`);
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
from collections import deque
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa

from safebunny.crashpoints import crash_point
from safebunny.delta.backend import table_identity
from safebunny.errors import SafeBunnyOptionError, moved_keywords
from safebunny.exactly_once.claims.batch_claims import BatchClaims, Claimed
from safebunny.exactly_once.collect.batch import Batch, NewMessages
from safebunny.exactly_once.collect.journal_read import JournalRead, SparkRead
from safebunny.exactly_once.collect.materialize import Materialized, identified, settle_outcome
from safebunny.exactly_once.emits.retrying_publisher import EmitPublisher, Published
from safebunny.exactly_once.emits.routed_rows import batch_publish_rows
from safebunny.exactly_once.handlers.frame_handler import run_frames
from safebunny.exactly_once.handlers.frame_record import FrameRecords
from safebunny.exactly_once.handlers.row_handler import RowRun
from safebunny.exactly_once.inbox.decisions import parking, rounds_of
from safebunny.exactly_once.inbox.table import Inbox, InboxRow
from safebunny.exactly_once.outcome import FailedRow, StepContext
from safebunny.exactly_once.protocol.epoch import step_epoch
from safebunny.exactly_once.protocol.report import BatchReport, Phases, log_report
from safebunny.exactly_once.protocol.settings import Handler, StepSettings
from safebunny.spark.session import activate

__all__ = ["Step"]


@dataclass
class _Run:
    """One batch under way: its session, its context, its clock, its rows, whether the handler is a row handler;
    after the dedupe, the ids done before and whether (E, N) is recorded already (a replay)."""

    spark: Any
    ctx: StepContext
    clock: Phases
    batch: Batch
    rows: bool
    seen: Collection[str] = ()
    replayed: bool = False
    spark_read: SparkRead | None = None
    #: the ids whose decision this batch committed to the decision table besides a row handler's (parkings, a
    #: DataFrame step's applied ones); and those it leaves to another batch whose decision landed first
    decided: Collection[str] = ()
    yielded: Collection[str] = ()


#: the keywords ``Step`` took before its settings were one StepSettings, each answered with its new form
_CONNECTION = "Step(node, inbox, StepSettings(connection=safebunny.ConnectionSettings(uri, password=...)))"
_SETTINGS_KEYWORDS = ("window", "row_retries", "max_isolation_jobs", "on_failed", "router", "publish_options", "epoch",
                      "publish_retry_seconds", "inbox_backend", "checkpoint", "prepare", "state", "journal", "skip",
                      "executor_publish_rows", "executor_partition_rows", "parked")


@moved_keywords({"uri": _CONNECTION, "password": _CONNECTION,
                 **{k: f"Step(node, inbox, StepSettings({k}=...))" for k in _SETTINGS_KEYWORDS}})
class Step:
    """An exactly-once step: ``query = df.writeStream.foreachBatch(step.foreach_batch(handler))...``.

    ``Step(node, inbox, settings)``: ``node`` is the step's node name (in the inbox partition and in derived
    ids); ``inbox`` the inbox Delta table (may be shared by many nodes): a path, written with delta-rs, or a table
    name when the session has Delta (``inbox_backend="spark"`` puts a path on Spark Delta too); every other
    setting is a keyword of ``settings``, a :class:`~safebunny.exactly_once.protocol.settings.StepSettings`
    (e.g. ``StepSettings(connection=ConnectionSettings(uri), executor_publish_rows=None)``), checked when it is made:

    - ``state``: where the step's claims, outcome logs and row decisions live (a path or URI); by default the
      inbox's folder, and required for an inbox given by table name
      (:func:`~safebunny.exactly_once.inbox.table.state_location`);
    - ``connection``: the broker for emits, a :class:`~safebunny.options.connection.ConnectionSettings` (its
      ``password`` keeps the secret out of the URI; its ``connection_name`` names their connection, by default
      ``safebunny/<node>/publisher``);
    - ``window``: the dedupe window (default 7 days): a duplicate arriving later is not caught;
    - ``row_retries``: in-place retries of a failing row in a row handler before it is failed;
    - ``max_isolation_jobs``: sub-jobs allowed to isolate failing rows of a DataFrame handler;
    - ``record_frame_outcomes``: a DataFrame handler's outcome (effect and emit rows, failed rows) is recorded
      before any of it is applied or sent, and a replay of its messages in any epoch applies and sends the record
      instead of running the handler again (:mod:`~safebunny.exactly_once.handlers.frame_record`; a row handler's
      decisions are always recorded);
    - ``on_failed(rows, ctx)``: receives the failed rows of each batch, before it commits; what it returns
      as ``{"retried": n, "parked": m}`` (a saga step's router) goes into the batch's report;
    - ``router``: (emit) -> (exchange, routing key) for emits without an explicit routing key;
    - ``publish_options``: how emits wait for the broker, a :class:`~safebunny.options.sink.PublishOptions`
      (e.g. ``PublishOptions(confirm_timeout_ms=5000)``, the sink's ``confirmTimeoutMs``);
    - ``publish_retry_seconds``: how long a batch keeps republishing its emits (the same ids) while the
      broker fails them, e.g. through a restart, before the batch fails (default 60 s);
    - ``executor_publish_rows``: a batch with more emitted messages than this publishes them from the
      executors through the sink, about ``executor_partition_rows`` (default 2,500) per task, instead of from
      the driver (0 or None: always from the driver). The default, ``"auto"``, is 5,000 where the executors
      are processes of their own (a cluster) and never on a ``local[...]`` session, where it only costs; see
      :mod:`~safebunny.exactly_once.emits.retrying_publisher`;
    - ``checkpoint``: the query's ``checkpointLocation``; over Spark Connect the step reads its epoch (the
      query id) there; without it, from the batch (:mod:`~safebunny.exactly_once.protocol.epoch`);
    - ``journal``: the source's ``journalLocation`` (a classic or quorum queue); with ``checkpoint``, each batch
      is read from its journal file on the driver and Spark's own read of it runs beside the step instead of
      before it (:mod:`~safebunny.exactly_once.collect.journal_read`; a saga passes both);
    - ``prepare``: for DataFrame handlers, ``prepare(arrow_rows, spark_schema)`` turns the new messages' rows into the
      handler's input on the driver (a :class:`~safebunny.exactly_once.collect.batch.Prepared`: one row per
      message, plus the messages it rejects) before any Spark job, or returns None to pass the rows as
      they are. A saga parses bodies this way (:meth:`safebunny.saga.define.bodies.Body.prepare`);
    - ``skip``: ``skip(arrow_rows)`` gives a boolean mask (or None) of the batch's rows to count as duplicates
      without handling them, applied on the driver to the batch as read. A saga skips fresh copies of the
      messages it parked this way (:meth:`safebunny.saga.run.parked_ids.ParkedIds.fresh_copies`);
    - ``parked``: ``parked(new_arrow_rows)`` gives the failed row of each new message that an earlier attempt
      failed for good and recorded so (in any epoch): it never reaches the handler, and goes to ``on_failed``
      with the recorded reason. A saga's parkings are recorded before their poison copies and compensation
      messages are sent (:meth:`safebunny.saga.run.parked_ids.ParkedIds.recorded`), so a redelivery that the
      handler would now accept is parked again, never applied;
    - ``parks``: ``parks(failed_rows)`` gives the parking record (``reason``, ``error_type``, ``attempt``,
      ``redriven``) of each failed row that ``on_failed`` will park for good, not parked before. The step commits
      them to its fenced decision table with its other decisions (a DataFrame step: ``{"ok": true}`` for each
      message it applies) before any effect or send, so of two live batches on one message exactly one decision
      lands: the other batch takes it, parking a message it would have applied or leaving one it failed to the
      batch that applied it (:mod:`~safebunny.exactly_once.inbox.decisions`). A saga parks this way.
    """

    def __init__(self, node: str, inbox: str, settings: StepSettings | None = None) -> None:
        self.settings = settings = StepSettings() if settings is None else settings
        if not isinstance(settings, StepSettings):  # the third argument was the uri in earlier releases
            raise SafeBunnyOptionError(
                f"Step's settings must be a safebunny.StepSettings, but got a {type(settings).__name__}; write "
                "Step(node, inbox, StepSettings(connection=safebunny.ConnectionSettings(uri), ...)).", "settings")
        if not isinstance(inbox, str) or not inbox.strip():  # "" would become the working directory
            raise SafeBunnyOptionError(
                f"Step's inbox must name the inbox Delta table, but got {inbox!r}; give a path or URI (or a table "
                "name with inbox_backend='spark'), e.g. Step(node, '/data/shop/inbox').", "inbox")
        self.node = node
        self.inbox = Inbox(inbox, node, settings.window, backend=settings.inbox_backend, state=settings.state)
        self._claimed = BatchClaims(node, self.inbox)
        self._rows = RowRun(self._claimed, settings.row_retries)
        self._frames = FrameRecords(self._claimed) if settings.record_frame_outcomes else None
        self._publisher = EmitPublisher(node, settings.publishing(node))  # one per step: reads "auto" once
        self.reports: deque[BatchReport] = deque(maxlen=200)
        self._journal = JournalRead(settings.journal, settings.checkpoint) \
            if settings.journal and settings.checkpoint else None

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
        """Run one batch through the protocol (the module's numbered steps; what ``foreach_batch`` calls).
        ``batch_df`` is the micro-batch as ``foreachBatch`` hands it, or a frame made from it (with ``journal``,
        only the former is read from its journal file: Spark collects a filtered or projected one).

        The batch is collected to the driver once (one Spark job, or its journal file read here while that job
        runs beside the step; its size is bounded by the source's ``maxMessagesPerTrigger``/``maxBytesPerTrigger``);
        the handler gets the new messages as a local DataFrame, so its effects and emits are cheap to compute and
        a failing row is isolated without reading the source again; emits are published with confirms from the
        driver, or from the executors when the batch has more than ``executor_publish_rows`` of them
        (``BatchReport.published_from``).
        """
        run = self._read(batch_df, batch_id, rows)
        new = self._dedupe(run)  # 1-2
        new = self._prepare(run, new)  # the handler's input, when the step has a prepare (a saga's)
        handled, result = self._handle(run, new, handler)  # 3
        publish, emitted = self._derive_emit_ids(run, new, result)  # 5's ids, before anything is written
        claimed = self._claim_and_apply(run, new, handled, result)  # 4
        published = self._publish(run, publish)  # 5
        routed = self._hand_failed(run, new, result)  # 5
        self._record(run, new, result, emitted, claimed)  # 6
        return self._report(run, new, result, publish.num_rows, published, routed)  # 7

    # -- the protocol's steps, in order ----------------------------------------------------------
    def _read(self, batch_df: Any, batch_id: int, rows: bool) -> _Run:
        """The batch's epoch, and its rows collected to the driver once (its one Spark job), less those the
        step's ``skip`` counts as duplicates."""
        clock = Phases()
        spark = activate(batch_df.sparkSession)
        settings = self.settings
        epoch = step_epoch(spark, batch_df, batch_id, settings.checkpoint, settings.epoch, self.node)
        scope = f"{epoch}/{batch_id}"
        journaled = None if self._journal is None else self._journal.read(spark, batch_df, epoch, batch_id)
        table, spark_read = (Batch.arrow(batch_df), None) if journaled is None else journaled
        batch = Batch.of(table, batch_df.schema, scope, settings.skip)
        clock.lap("read")
        crash_point("step.after_consume")
        return _Run(spark, StepContext(self.node, batch_id, epoch), clock, batch, rows, spark_read=spark_read)

    def _dedupe(self, run: _Run) -> NewMessages:
        """1-2. The first copy of each id not done in the inbox (leaving out (E, N)'s own rows); the ids that
        are, and whether (E, N) is recorded already (a replay), go to ``run``."""
        ctx = run.ctx
        run.seen = self.inbox.seen(run.batch.first_ids(), ctx.epoch, ctx.batch_id)
        new = run.batch.new(run.seen)
        if self.settings.parked is not None and new.count:  # failed for good before: never handled again
            new = new.with_rejected(self.settings.parked(new.table))
        # an empty batch (a tick that lets Spark commit the batch before it, so the source acks it) records nothing
        run.replayed = bool(run.batch.received) and self.inbox.batch_done(ctx.epoch, ctx.batch_id)
        run.clock.lap("dedupe")
        return new

    def _prepare(self, run: _Run, new: NewMessages) -> NewMessages:
        """A DataFrame handler's input made by the step's ``prepare`` on the driver (its rejections added)."""
        prepare = self.settings.prepare
        if prepare is None or run.rows or not new.count:
            return new
        prepared = prepare(new.table, new.schema)
        return new if prepared is None else new.with_prepared(prepared)

    def _handle(self, run: _Run, new: NewMessages, handler: Handler) -> tuple[Materialized, Materialized]:
        """3. The handler's outcome on the new messages (failing rows isolated), and that outcome settled:
        failed and rejected messages without rows, one row per merge key."""
        def commit(decisions: Mapping[str, Any], rounds: Mapping[str, str | None]) -> dict[str, Any]:  # fenced
            return self._claimed.commit_decisions(run.spark, run.ctx.epoch, run.ctx.batch_id, new.ids, decisions,
                                                  rounds, parks is not None)

        parks = self.settings.parks
        named = lambda table: table_identity(table, run.spark)  # noqa: E731 - one table, one name (docs)
        if run.rows:
            handled, run.decided = self._rows.run(new.for_handler(), handler, run.ctx, run.replayed, commit, parks,
                                                  new.rejected)
            handled = identified(handled, named)
            result = settle_outcome(handled, new.order, new.rejected)
        else:
            def compute(part: NewMessages) -> Materialized:
                return run_frames(run.spark, part, handler, run.ctx, self.settings.max_isolation_jobs)

            # recorded: a replay (any epoch) takes what the first attempt decided, recorded before anything is applied
            handled = compute(new.for_handler()) if self._frames is None else \
                self._frames.run(new.for_handler(), run.ctx, compute)
            handled = identified(handled, named)
            result = settle_outcome(handled, new.order, new.rejected)
            if parks is not None and not run.replayed and new.count:
                handled, result = self._decide_frames(run, new, handled, result, commit)
        run.clock.lap("handler")
        return handled, result

    def _decide_frames(self, run: _Run, new: NewMessages, handled: Materialized, result: Materialized,
                       commit: Callable[..., dict[str, Any]]) -> tuple[Materialized, Materialized]:
        """3, with ``parks``: a DataFrame step's decisions committed, fenced: ``{"ok": true}`` per message applied
        and the new parkings; a message another batch's decision covers follows it (parked, or left to that batch)."""
        assert self.settings.parks is not None
        failed = [replace(f, row=f.row or new.row_of(f.message_id)) for f in result.failed.values()]
        mine: dict[str, Any] = {mid: {"ok": True} for mid in new.ids if mid not in result.failed}
        mine.update({mid: parking(record) for mid, record in self.settings.parks(failed).items()})
        committed = commit(mine, rounds_of(new.table))
        run.decided = list(mine)
        run.yielded = {mid for mid, d in committed.items() if d.get("ok") and mid in result.failed}
        parked = {mid: FailedRow(mid, d["reason"], 1, new.correlation_of().get(mid), d.get("error_type"))
                  for mid, d in committed.items() if d.get("parked") and mid not in result.failed}
        if parked:  # another batch parked them first: no effect, no emit here
            result = settle_outcome(handled, new.order, {**new.rejected, **parked})
        for mid in run.yielded:  # another batch applied them: nothing to send or mark for them here
            result.failed.pop(mid, None)
        return handled, result

    def _derive_emit_ids(self, run: _Run, new: NewMessages,
                         result: Materialized) -> tuple[pa.Table, dict[str, list[str]]]:
        """The publish rows of the settled emits, ids derived from their causes, and the ids emitted per cause."""
        out = batch_publish_rows(result.emits, node=self.node, router=self.settings.router,
                                 correlation_of=new.correlation_of())
        run.clock.lap("ids")
        return out

    def _claim_and_apply(self, run: _Run, new: NewMessages, handled: Materialized, result: Materialized) -> Claimed:
        """4. Unless (E, N) is recorded: its claim, then each Delta effect with app transaction (E, N)."""
        if run.spark_read is not None:  # Spark's read of the batch (its progress counts the rows), beside 4-6
            run.spark_read.start()
        if run.replayed:
            return False, []
        claimed = self._claimed.apply_batch(run.spark, run.ctx.epoch, run.ctx.batch_id, new.ids, handled, result,
                                            run.rows, run.decided, recorded=self._frames is not None)
        run.clock.lap("effects")
        crash_point("step.after_effects")
        return claimed

    def _publish(self, run: _Run, publish: pa.Table) -> Published:
        """5. Every emit, confirmed, on every attempt; before the inbox marker: once the marker is in, a copy of
        these messages redelivered to another epoch (a new checkpoint, another driver) is a duplicate there and
        sends nothing."""
        published = Published("", 0, 0)
        if publish.num_rows:
            ctx = run.ctx
            published = self._publisher.publish(run.spark, publish, f"step:{self.node}/{ctx.epoch}/{ctx.batch_id}")
            crash_point("step.after_publish")
        run.clock.lap("publish")
        return published

    def _hand_failed(self, run: _Run, new: NewMessages, result: Materialized) -> Mapping[str, int]:
        """5. The failed rows to ``on_failed``; what it retried and parked, as it says."""
        routed: Mapping[str, int] | None = None
        on_failed = self.settings.on_failed
        if result.failed and on_failed is not None:
            routed = on_failed([replace(f, row=f.row or new.row_of(f.message_id)) for f in result.failed.values()],
                               run.ctx)
        run.clock.lap("failed")
        return routed if isinstance(routed, Mapping) else {}

    def _record(self, run: _Run, new: NewMessages, result: Materialized, emitted: Mapping[str, list[str]],
                claimed: Claimed) -> None:
        """6. Unless (E, N) is recorded, or empty: new(N) appended to the inbox as the batch's marker, then the
        claim removed (and the orphaned claims whose ids are all done). An empty batch commits nothing."""
        epoch, batch_id = run.ctx.epoch, run.ctx.batch_id
        if not run.replayed and run.batch.received:
            self.inbox.record(_inbox_rows(new, result, emitted, run.yielded), epoch, batch_id)
            parked = [mid for mid in run.decided if mid in result.failed]
            for orphan in self._claimed.release(epoch, batch_id, claimed, parked):
                if self._frames is not None:
                    self._frames.forget(orphan.epoch, orphan.batch_id)
            run.clock.lap("inbox")
        if run.spark_read is not None:
            run.spark_read.wait()
            run.clock.lap("spark_read")
        crash_point("step.after_inbox")
        if run.rows:
            self._rows.outcomes.forget_before(epoch, batch_id)
        elif self._frames is not None:
            self._frames.forget_before(epoch, batch_id)

    def _report(self, run: _Run, new: NewMessages, result: Materialized, emitted: int, published: Published,
                routed: Mapping[str, int]) -> BatchReport:
        """7. What the batch did, kept and logged; then Spark commits the batch and the source acks it."""
        batch, seen, failed, skipped = run.batch, run.seen, len(result.failed), run.batch.skipped
        report = BatchReport(
            self.node, run.ctx.epoch, run.ctx.batch_id, batch.received + skipped,
            batch.received - batch.distinct + len(seen) + skipped,
            len(seen), new.count - failed, failed, emitted, run.replayed, run.clock.seconds(),
            dt.datetime.now(dt.timezone.utc), run.clock.laps, published.where, published.partitions,
            published.attempts, int(routed.get("retried", 0)), int(routed.get("parked", 0)))
        self.reports.append(report)
        log_report(report)
        return report


def _inbox_rows(new: NewMessages, result: Materialized, emitted: Mapping[str, list[str]],
                yielded: Collection[str] = ()) -> list[InboxRow]:
    """The marker's rows: each new message done or failed, but those left to a batch whose decision landed first
    (that batch, or the one that takes its messages over, marks them)."""
    out = []
    columns = zip(new.ids, new.correlations, new.causations, new.types, strict=True)
    for mid, correlation, causation, message_type in columns:
        if mid in yielded:
            continue
        failed = result.failed.get(mid)
        out.append(InboxRow(mid, correlation, causation, "failed" if failed else "done",
                            failed.reason if failed else None, failed.attempts if failed else 1,
                            tuple(emitted.get(mid, ())), message_type))
    return out
