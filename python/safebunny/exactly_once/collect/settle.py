"""Settling a batch's outcome before anything is written (pure pyarrow, tested without Spark).

A failed message's rows are taken out of every effect and emit table, and a merge keeps one row per key,
that of the message last in the source's order (docs/exactly-once.md, "Bad data: applied once, or parked
with a reason").
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

import pyarrow as pa
import pyarrow.compute as pc

from safebunny.delta.merge_rows import last_per_key
from safebunny.exactly_once.collect.materialize import Materialized
from safebunny.exactly_once.outcome import FailedRow

__all__ = ["settle_outcome"]


def settle_outcome(result: Materialized, order: Mapping[str, int], rejected: Mapping[str, FailedRow] | None = None
           ) -> Materialized:
    """``result`` with the ``rejected`` messages failed, every failed message's rows removed, and each
    merge effect reduced to one row per key (last in ``order``, message id -> source position)."""
    failed = {**(rejected or {}), **result.failed}
    out = Materialized(failed=failed)
    for key, (item, table) in result.effects.items():
        table = without_messages(table, failed)
        if item.kind == "merge":
            table = last_per_key(table, item.on, order)
        out.effects[key] = (item, table)
    for key, (item, table) in result.emits.items():
        out.emits[key] = (item, without_messages(table, failed))
    return out


def without_messages(table: pa.Table, message_ids: Collection[str]) -> pa.Table:
    """The rows of ``table`` whose ``messageId`` is not in ``message_ids``."""
    if not message_ids or "messageId" not in table.column_names or table.num_rows == 0:
        return table
    drop = pc.is_in(table.column("messageId"), value_set=pa.array(list(message_ids), pa.string()))
    return table.filter(pc.invert(pc.fill_null(drop, False)))
