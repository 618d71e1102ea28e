"""One source row per merge key (pure pyarrow): a merge whose source holds two rows for one key fails in
Delta ("matched a target row with multiple source rows") or, for a new key, inserts both.

The rule, the same for every backend: the row of the message last in the source's order wins, then the
handler's last row; rows with a null key are all kept (docs/exactly-once.md, "Two messages for one key").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pyarrow as pa

__all__ = ["last_per_key"]


def last_per_key(table: pa.Table, on: Sequence[str], order: Mapping[str, int] | None = None) -> pa.Table:
    """One row per value of the ``on`` columns: the row whose message (``messageId``) is last in ``order``
    (message id -> source position; ties, or no ``order``: the later row of the table). Rows with a null
    in a key column all stay. Row order otherwise kept."""
    if table.num_rows < 2 or any(k not in table.column_names for k in on):
        return table  # a missing key column is the merge's own error to report
    keys = list(zip(*(table.column(k).to_pylist() for k in on), strict=True))
    messages = (table.column("messageId").to_pylist() if "messageId" in table.column_names
                else [None] * table.num_rows)
    order = order or {}
    unknown = len(order)
    winner: dict[tuple, tuple[int, int]] = {}
    for row, (key, mid) in enumerate(zip(keys, messages, strict=True)):
        if any(part is None for part in key):
            continue
        rank = (order.get(mid, unknown) if mid is not None else unknown, row)
        if key not in winner or rank > winner[key]:
            winner[key] = rank
    if len(winner) == sum(1 for key in keys if not any(part is None for part in key)):
        return table  # no key repeats: nothing to do
    keep = sorted({rank[1] for rank in winner.values()}
                  | {row for row, key in enumerate(keys) if any(part is None for part in key)})
    return table.take(pa.array(keep, pa.int64()))
