"""Settling a batch's outcome before anything is written (pure pyarrow, tested without Spark).

Two rules keep "applied once, or parked" true for every message:

- a failed message has no effect and no emit: its rows are taken out of every effect and emit table
  (whether the handler declared it failed in ``Outcome.failed``, the step isolated it, or it was
  rejected before the handler), so the retry that brings it back applies it once;
- a merge writes one row per key: when several rows of a batch share the merge keys, the row of the
  message that came last in the source's order wins (as an upsert stream would have it, one message
  after the other); among rows of one message, the last the handler gave wins. Rows with a null key
  are kept as they are (a null never matches, so each is inserted, as the merge itself does).
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
