"""A step's micro-batch on the driver, collected once, deduplicated, and handed out as local DataFrames.

:meth:`Batch.arrow` runs the batch's one Spark job (``toArrow``), or the rows of its journal file are read
(:mod:`~safebunny.exactly_once.collect.journal_read`); :meth:`Batch.of` takes them in the source's order
(a queue batch is one journal file, a stream batch its partitions in order), which is what makes the
in-batch dedupe deterministic: the first copy of an id wins (DESIGN.md, the inbox protocol, 1).
:meth:`Batch.new` leaves out the ids the inbox has seen; :meth:`NewMessages.frame` gives the handler
any subset of the new messages as a DataFrame built from the Arrow rows (no second read of the
source, and a failing row can be isolated without re-running the batch's input).

A message without a ``messageId`` is never handed to the handler: it gets a stand-in id (:func:`stand_in_id`)
and fails with the reason (docs/exactly-once.md, "A message without a message_id").

The rest is pure pyarrow, tested without Spark.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from safebunny.amqp.outgoing import CAUSATION_HEADER
from safebunny.errors import SafeBunnyOptionError
from safebunny.exactly_once.outcome import FailedRow

__all__ = ["Batch", "NewMessages", "Prepared", "Skip", "STAND_IN_PREFIX"]

#: (the batch's Arrow rows) -> a boolean mask of the rows to count as duplicates without handling them, or None
Skip = Callable[[pa.Table], "pa.Array | pa.ChunkedArray | None"]

#: Stand-in ids start with this, so a person reading poison or the inbox sees what they are.
STAND_IN_PREFIX = "missing-message-id-"
#: The error type of a message rejected for having no id (a saga sends it to poison at once).
MISSING_ID_ERROR = "MalformedMessage"
_STAND_IN_NAMESPACE = uuid.UUID("5a4f1e0c-2b7d-4c61-9a57-6f0e7d7b3a21")


def stand_in_id(scope: str, position: int, body: bytes | str | None) -> str:
    """The id given to a message that has none: ``missing-message-id-<uuid5>`` of the batch's scope
    (epoch and batch id), the message's position in the batch and its body's SHA-256. A replay of
    the batch gives the same id; two such messages never share one."""
    raw = body.encode() if isinstance(body, str) else (body or b"")
    name = f"{scope}|{position}|{hashlib.sha256(raw).hexdigest()}"
    return STAND_IN_PREFIX + str(uuid.uuid5(_STAND_IN_NAMESPACE, name))


def _column(table: pa.Table, name: str) -> list[Any]:
    return table.column(name).to_pylist() if name in table.column_names else [None] * table.num_rows


def _causations(table: pa.Table) -> list[str | None]:
    return [next((item for key, item in headers or () if key == CAUSATION_HEADER), None)
            for headers in _column(table, "headers")]


@dataclass(frozen=True)
class Prepared:
    """A step's ``prepare`` result: the handler's input rows, made on the driver from the new messages'
    Arrow rows before any Spark job (a saga parses bodies here).

    ``table`` has one row per message given to ``prepare``, in the same order; ``schema`` is its Spark
    schema; ``rejected`` holds the messages that must not reach the handler (failed with their reason;
    their rows in ``table`` are never read).
    """

    table: pa.Table
    schema: Any
    rejected: Mapping[str, FailedRow] = field(default_factory=dict)


@dataclass(frozen=True)
class NewMessages:
    """The messages of a batch that the step has not processed before, in the source's order."""

    table: pa.Table
    schema: Any  # the Spark schema of the batch (None outside Spark)
    ids: list[str]
    correlations: list[str | None]
    causations: list[str | None]
    types: list[str | None]
    #: messages rejected before the handler (no message id, or refused by the step's ``prepare``)
    rejected: Mapping[str, FailedRow] = field(default_factory=dict)
    #: the handler's input when the step's ``prepare`` made it (row-aligned with ``table``), else None
    prepared: Prepared | None = None

    @property
    def count(self) -> int:
        return len(self.ids)

    def with_prepared(self, prepared: Prepared) -> NewMessages:
        """These messages with the handler's input made by ``prepare`` from :attr:`table` (row-aligned)
        and its rejections added; :attr:`table` stays the messages as received (what ``on_failed`` gets)."""
        if prepared.table.num_rows != self.count:
            raise SafeBunnyOptionError(
                f"A step's prepare function returned {prepared.table.num_rows} rows for {self.count} messages; it "
                "must return one row per message, in order (reject a message through Prepared.rejected).",
                "prepare")
        return replace(self, rejected={**self.rejected, **prepared.rejected}, prepared=prepared)

    def with_rejected(self, rejected: Mapping[str, FailedRow]) -> NewMessages:
        """These messages with ``rejected`` (id -> failed row) kept from the handler too."""
        return replace(self, rejected={**self.rejected, **rejected}) if rejected else self

    def for_handler(self) -> NewMessages:
        """These messages without the rejected ones: what the handler is given."""
        if not self.rejected:
            return self
        return self.subset([p for p, mid in enumerate(self.ids) if mid not in self.rejected])

    def subset(self, positions: Sequence[int]) -> NewMessages:
        """The messages at ``positions`` (indexes into :attr:`ids`, in order), without rejections."""
        take = pa.array(positions, pa.int64())
        prepared = None if self.prepared is None else Prepared(self.prepared.table.take(take), self.prepared.schema)
        return NewMessages(self.table.take(take), self.schema, [self.ids[p] for p in positions],
                           [self.correlations[p] for p in positions], [self.causations[p] for p in positions],
                           [self.types[p] for p in positions], prepared=prepared)

    def correlation_of(self) -> dict[str, str | None]:
        return dict(zip(self.ids, self.correlations, strict=True))

    def frame(self, spark: Any, positions: Sequence[int]) -> Any:
        """The messages at ``positions`` (indexes into :attr:`ids`) as a DataFrame: the batch's rows, or
        the prepared input when the step has a ``prepare``. A small one is a local relation in Spark, so
        projections of it are collected without a Spark job (:mod:`~safebunny.exactly_once.collect.materialize`)."""
        table, schema = (self.table, self.schema) if self.prepared is None else (self.prepared.table,
                                                                                  self.prepared.schema)
        subset = table if len(positions) == self.count else table.take(pa.array(positions, pa.int64()))
        return spark.createDataFrame(subset, schema=schema)

    def row_of(self, message_id: str) -> dict[str, Any] | None:
        """The whole input row of one new message (handed to ``on_failed``), or None if unknown."""
        position = self.order.get(message_id)
        return None if position is None else self.table.slice(position, 1).to_pylist()[0]

    @cached_property
    def order(self) -> dict[str, int]:
        """Message id -> position in the source's order (what "last wins" of a merge goes by), built on first use
        (a batch whose every row failed asks once per row)."""
        return {mid: position for position, mid in enumerate(self.ids)}


@dataclass(frozen=True)
class Batch:
    """One micro-batch's rows (Arrow, source order) with its distinct ids, first copy first."""

    table: pa.Table
    schema: Any
    first: dict[str, int]  # message id -> position of its first copy (stand-in ids included)
    missing: frozenset[str] = frozenset()  # the stand-in ids of messages without an id
    skipped: int = 0  # rows left out by the step's ``skip`` (duplicates; not in ``table``)

    @staticmethod
    def arrow(df: Any) -> pa.Table:
        """Collect ``df`` (the micro-batch) to the driver as Arrow rows: the batch's one Spark job."""
        if "messageId" not in df.columns:
            raise SafeBunnyOptionError(
                f"A step reads safebunny's source rows, which have a 'messageId' column; got columns {df.columns}.",
                "messageId")
        return df.toArrow()

    @classmethod
    def of(cls, table: pa.Table, schema: Any = None, scope: str = "", skip: Skip | None = None) -> Batch:
        """A batch from Arrow rows in the source's order. A row without a message id gets a stand-in
        id (``scope`` names the batch, e.g. ``"<epoch>/<batch id>"``) and is rejected by :meth:`new`. The rows
        ``skip`` marks are then left out (counted in ``skipped``): after the stand-in ids, so that a row's
        stand-in id is its position in the batch as read, whatever a replay skips."""
        first: dict[str, int] = {}
        ids = table.column("messageId").to_pylist()
        missing = [p for p, mid in enumerate(ids) if mid is None]
        if missing:
            bodies = _column(table, "value")
            for position in missing:
                ids[position] = stand_in_id(scope, position, bodies[position])
            table = table.set_column(table.column_names.index("messageId"), "messageId",
                                     pa.array(ids, table.schema.field("messageId").type))
        stand_ins = frozenset(ids[p] for p in missing)
        mask = None if skip is None or not table.num_rows else skip(table)
        skipped = 0 if mask is None else int(pc.sum(mask).as_py() or 0)
        if skipped:
            keep = pc.invert(mask)
            table = table.filter(keep)
            ids = [mid for mid, kept in zip(ids, keep.to_pylist(), strict=True) if kept]
        for position, mid in enumerate(ids):
            first.setdefault(mid, position)
        return cls(table, schema, first, stand_ins, skipped)

    @property
    def received(self) -> int:
        return self.table.num_rows

    @property
    def distinct(self) -> int:
        return len(self.first)

    def first_ids(self) -> list[str]:
        return list(self.first)

    def new(self, seen: Mapping[str, Any] | set[str]) -> NewMessages:
        """The first copy of each id not in ``seen``, in the source's order."""
        positions = [p for mid, p in self.first.items() if mid not in seen]
        table = self.table.take(pa.array(positions, pa.int64()))
        ids, correlations = _column(table, "messageId"), _column(table, "correlationId")
        rejected = {mid: FailedRow(mid, _MISSING_REASON, 1, correlation, MISSING_ID_ERROR)
                    for mid, correlation in zip(ids, correlations, strict=True) if mid in self.missing}
        return NewMessages(table, self.schema, ids, correlations, _causations(table), _column(table, "type"),
                           rejected)


_MISSING_REASON = (
    "the message has no message_id property, so it cannot be deduplicated or applied exactly once; it was "
    "given a stand-in id (starting 'missing-message-id-') and parked. Publish it again with a message_id "
    "(the safebunny sink always sets one).")
