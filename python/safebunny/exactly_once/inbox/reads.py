"""The inbox's look-ups that each backend answers its own way (is a batch done, which ids were seen); writes, plain
reads and maintenance go through its target (:mod:`safebunny.delta`), which checks a replayed append (delta-rs) or
has Spark Delta skip it.

- delta-rs (a path, the default): pyarrow filters on the node's partitions inside the window, answered by the
  node's :class:`~safebunny.exactly_once.inbox.index.SeenIndex` (O(batch)) when it can, else by a scan; "batch
  done" is the inbox app transaction's version;
- Spark Delta (a name): DataFrame filters with literal values (named SQL parameters are unbound with Delta's SQL
  extension on Spark 4.2: :mod:`safebunny.delta.spark_delta`); "batch done" is read from the table's rows (an empty
  batch that reads as not done only re-applies effects that are idempotent anyway).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from safebunny.delta.delta_rs import DeltaRsTarget
from safebunny.delta.spark_delta import SparkDeltaTarget
from safebunny.exactly_once.inbox.index import SeenIndex

__all__: list[str] = []


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
        found = self.delta.scan(flt, ["messageId"])
        return set() if found is None else set(found.column("messageId").to_pylist())


class SparkInboxStore:
    """One inbox table's look-ups, through the active SparkSession's Delta."""

    def __init__(self, target: SparkDeltaTarget) -> None:
        self.target = target

    def batch_done(self, app_id: str, node: str, epoch: str, batch_id: int) -> bool:
        if not self.target.exists():
            return False
        from pyspark.sql import functions as F

        mine = (F.col("node") == F.lit(node)) & (F.col("epoch") == F.lit(epoch)) & (F.col("batchId") == F.lit(batch_id))
        return bool(self.target.frame().where(mine).limit(1).count())

    def seen(self, node: str, since: dt.date, message_ids: Sequence[str], epoch: str, batch_id: int) -> set[str]:
        if not self.target.exists():
            return set()
        from pyspark.sql import functions as F

        ids = self.target.spark().createDataFrame(pa.table({"messageId": pa.array(list(message_ids), pa.string())}))
        own = (F.col("epoch") == F.lit(epoch)) & (F.col("batchId") == F.lit(batch_id))
        done = self.target.frame().where((F.col("node") == F.lit(node))
                                         & (F.col("processedDate") >= F.lit(since.isoformat()))
                                         & (F.col("status") == F.lit("done")) & ~own)
        found = done.select("messageId").join(F.broadcast(ids), "messageId", "left_semi").distinct().toArrow()
        return set(found.column("messageId").to_pylist())
