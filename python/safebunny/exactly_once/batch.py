"""A step's micro-batch on the driver: collected once, deduplicated, and handed out as local DataFrames.

:meth:`Batch.collect` runs the batch's one Spark job (``toArrow``), in the source's order (a
queue batch is one journal file, a stream batch its partitions in order), which is what makes the
in-batch dedupe deterministic: the first copy of an id wins (DESIGN.md, the inbox protocol, 1).
:meth:`Batch.new` leaves out the ids the inbox has seen; :meth:`NewMessages.frame` gives the handler
any subset of the new messages as a DataFrame built from the Arrow rows (no second read of the
source, and a failing row can be isolated without re-running the batch's input).

The rest is pure pyarrow, tested without Spark.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import pyarrow as pa

from safebunny.amqp.outgoing import CAUSATION_HEADER
from safebunny.errors import SafeBunnyError, SafeBunnyOptionError

__all__ = ["Batch", "NewMessages"]


def _column(table: pa.Table, name: str) -> list[Any]:
    return table.column(name).to_pylist() if name in table.column_names else [None] * table.num_rows


def _causations(table: pa.Table) -> list[str | None]:
    if "headers" not in table.column_names:
        return [None] * table.num_rows
    out: list[str | None] = []
    for headers in table.column("headers").to_pylist():
        value = None
        for key, item in headers or ():
            if key == CAUSATION_HEADER:
                value = item
                break
        out.append(value)
    return out


@dataclass(frozen=True)
class NewMessages:
    """The messages of a batch that the step has not processed before, in the source's order."""

    table: pa.Table
    schema: Any  # the Spark schema of the batch (None outside Spark)
    ids: list[str]
    correlations: list[str | None]
    causations: list[str | None]
    types: list[str | None]

    @property
    def count(self) -> int:
        return len(self.ids)

    def correlation_of(self) -> dict[str, str | None]:
        return dict(zip(self.ids, self.correlations, strict=True))

    def frame(self, spark: Any, positions: Sequence[int]) -> Any:
        """The messages at ``positions`` (indexes into :attr:`ids`) as a DataFrame of the batch's schema."""
        subset = self.table if len(positions) == self.count else self.table.take(pa.array(positions, pa.int64()))
        return spark.createDataFrame(subset, schema=self.schema)

    def row_of(self, message_id: str) -> dict[str, Any] | None:
        """The whole input row of one new message (handed to ``on_failed``), or None if unknown."""
        position = self._positions.get(message_id)
        return None if position is None else self.table.slice(position, 1).to_pylist()[0]

    @cached_property
    def _positions(self) -> dict[str, int]:
        """Id -> position, built on first use (a batch whose every row failed asks once per row)."""
        return {mid: position for position, mid in enumerate(self.ids)}


@dataclass(frozen=True)
class Batch:
    """One micro-batch's rows (Arrow, source order) with its distinct ids, first copy first."""

    table: pa.Table
    schema: Any
    first: dict[str, int]  # message id -> position of its first copy

    @classmethod
    def collect(cls, df: Any) -> Batch:
        """Collect ``df`` (the micro-batch) to the driver: the batch's one Spark job."""
        if "messageId" not in df.columns:
            raise SafeBunnyOptionError(
                f"A step reads safebunny's source rows, which have a 'messageId' column; got columns {df.columns}.",
                "messageId")
        return cls.of(df.toArrow(), df.schema)

    @classmethod
    def of(cls, table: pa.Table, schema: Any = None) -> Batch:
        """A batch from Arrow rows in the source's order; every row needs a message id."""
        first: dict[str, int] = {}
        missing = 0
        for position, mid in enumerate(table.column("messageId").to_pylist()):
            if mid is None:
                missing += 1
            elif mid not in first:
                first[mid] = position
        if missing:
            raise SafeBunnyError(
                f"{missing} message(s) of this batch have no message id, so they cannot be deduplicated. Publish "
                "with a message_id property (the safebunny sink always sets one), or set one upstream.")
        return cls(table, schema, first)

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
        return NewMessages(table, self.schema, _column(table, "messageId"), _column(table, "correlationId"),
                           _causations(table), _column(table, "type"))
