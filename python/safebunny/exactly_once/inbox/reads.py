"""The inbox's look-ups, in each backend's own terms; writes and maintenance go through its target
(:mod:`safebunny.delta`), which checks a replayed append (delta-rs) or has Spark Delta skip it.

- delta-rs (a path, the default): pyarrow filters on the node's partitions inside the window, answered by the
  node's :class:`~safebunny.exactly_once.inbox.index.SeenIndex` (O(batch)) when it can, else by a scan; "batch
  done" is the inbox app transaction's version;
- Spark Delta (a name): SQL built by pure functions (tested without Delta) and run with named parameters; "batch
  done" is read from the table's rows (an empty batch that reads as not done only re-applies effects that are
  idempotent anyway).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from safebunny.delta.delta_rs import DeltaRsTarget
from safebunny.delta.spark_delta import SparkDeltaTarget, quote_name
from safebunny.exactly_once.inbox.index import SeenIndex
from safebunny.exactly_once.inbox.schema import INBOX_SCHEMA

__all__ = ["seen_sql", "batch_done_sql", "rows_sql"]


class DeltaRsInboxStore:
    """One inbox table's look-ups, read with delta-rs."""

    def __init__(self, delta: DeltaRsTarget, indexed: bool = True) -> None:
        self.delta = delta
        self.indexed = indexed
        self._indexes: dict[str, SeenIndex] = {}

    def batch_done(self, app_id: str, node: str, epoch: str, batch_id: int) -> bool:
        committed = self.delta.versions({app_id: batch_id})[app_id]
        return committed is not None and committed >= batch_id

    def seen(self, node: str, since: dt.date, message_ids: Sequence[str], epoch: str, batch_id: int) -> set[str]:
        index = self._indexes.get(node)
        if index is None and self.indexed:
            index = self._indexes[node] = SeenIndex(self.delta, node)
        if index is not None:
            found = index.lookup(message_ids, since, epoch, batch_id)
            if found is not None:
                return found
        return self.scan(node, since, message_ids, epoch, batch_id)

    def scan(self, node: str, since: dt.date, message_ids: Sequence[str], epoch: str, batch_id: int) -> set[str]:
        """:meth:`seen` by reading the node's partitions in the window (what the index saves)."""
        field = pc.field
        flt = ((field("node") == node) & (field("processedDate") >= since.isoformat())
               & (field("status") == "done") & field("messageId").isin(pa.array(list(message_ids), pa.string()))
               & ~((field("epoch") == epoch) & (field("batchId") == batch_id)))
        found = self.delta.read(flt, ["messageId"])
        return set() if found is None else set(found.column("messageId").to_pylist())

    def rows(self, node: str | None, correlation_id: str | None) -> pa.Table:
        flt = None if node is None else (pc.field("node") == node)
        if correlation_id is not None:
            by_corr = pc.field("correlationId") == correlation_id
            flt = by_corr if flt is None else flt & by_corr
        found = self.delta.read(flt)
        return INBOX_SCHEMA.empty_table() if found is None else found


def seen_sql(ref: str, ids_view: str) -> str:
    """Ids of the view ``ids_view`` that node ``:node`` has done since ``:since``, except batch
    ``(:epoch, :batch)``'s own rows."""
    return (f"SELECT DISTINCT t.messageId FROM {ref} AS t JOIN {quote_name(ids_view)} AS i "
            "ON t.messageId = i.messageId WHERE t.node = :node AND t.processedDate >= :since "
            "AND t.status = 'done' AND NOT (t.epoch = :epoch AND t.batchId = :batch)")


def batch_done_sql(ref: str) -> str:
    return f"SELECT 1 FROM {ref} WHERE node = :node AND epoch = :epoch AND batchId = :batch LIMIT 1"


def rows_sql(ref: str, by_node: bool, by_correlation: bool) -> str:
    where = [c for c, on in (("node = :node", by_node), ("correlationId = :correlation", by_correlation)) if on]
    return f"SELECT * FROM {ref}" + (f" WHERE {' AND '.join(where)}" if where else "")


class SparkInboxStore:
    """One inbox table's look-ups, through the active SparkSession's Delta."""

    def __init__(self, target: SparkDeltaTarget) -> None:
        self.target = target

    def batch_done(self, app_id: str, node: str, epoch: str, batch_id: int) -> bool:
        found = self.target.query(batch_done_sql(self.target.ref), node=node, epoch=epoch, batch=batch_id)
        return found is not None and found.num_rows > 0

    def seen(self, node: str, since: dt.date, message_ids: Sequence[str], epoch: str, batch_id: int) -> set[str]:
        if not self.target.exists():
            return set()
        spark = self.target.spark()
        view = f"safebunny_inbox_ids_{abs(hash((node, epoch, batch_id)))}"
        spark.createDataFrame(pa.table({"messageId": pa.array(list(message_ids), pa.string())})) \
            .createOrReplaceTempView(view)
        try:
            found = spark.sql(seen_sql(self.target.ref, view), args={"node": node, "since": since.isoformat(),
                                                                      "epoch": epoch, "batch": batch_id}).toArrow()
        finally:
            spark.catalog.dropTempView(view)
        return set(found.column("messageId").to_pylist())

    def rows(self, node: str | None, correlation_id: str | None) -> pa.Table:
        args = {k: v for k, v in (("node", node), ("correlation", correlation_id)) if v is not None}
        found = self.target.query(rows_sql(self.target.ref, node is not None, correlation_id is not None), **args)
        return INBOX_SCHEMA.empty_table() if found is None else found
