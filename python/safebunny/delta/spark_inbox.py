"""An inbox's look-ups on a Spark Delta table (a table by name, or a path given ``backend="spark"``).

"Seen" is answered by the node's index (:mod:`.spark_index`: no read of its rows unless an id was seen before, or
another process wrote the table); "batch done" is read from the table's history, whose commits name their marker
(:func:`~safebunny.delta.commit_tags.commit_tag`), and from its rows where log cleanup cut it. Rows are read with
DataFrame filters of literal values (named SQL parameters are unbound with Delta's SQL extension on Spark 4.2).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from functools import reduce
from typing import Any

import pyarrow as pa

from safebunny.delta.spark_history import Entry
from safebunny.delta.spark_index import SparkSeenIndex, marker_in
from safebunny.delta.spark_table import SparkTable

__all__ = ["SparkInbox"]


class SparkInbox:
    """The look-ups of the inbox in ``target``'s table, with an index of done ids per node; the table its indexes
    read (:class:`~safebunny.delta.spark_index.IndexedTable`)."""

    def __init__(self, target: SparkTable) -> None:
        self.target = target
        self._indexes: dict[str, SparkSeenIndex] = {}

    def batch_done(self, app_id: str, node: str, epoch: str, batch_id: int) -> bool:
        """:meth:`DeltaTarget.batch_done`: from the history the node's last look-up read when it was this batch's,
        else from a new read; from the rows where log cleanup cut the history."""
        index = self._indexes.get(node)
        history = index.history_read_for(epoch, batch_id) if index is not None else None
        found = marker_in(self.history_entries() if history is None else history, app_id, batch_id)
        if found is not None:
            return found
        from pyspark.sql import functions as F

        mine = (F.col("node") == F.lit(node)) & (F.col("epoch") == F.lit(epoch)) & (F.col("batchId") == F.lit(batch_id))
        return bool(self.target.frame().where(mine).limit(1).count())

    def seen(self, node: str, since: dt.date, message_ids: Sequence[str], epoch: str, batch_id: int) -> set[str]:
        """:meth:`DeltaTarget.seen`, answered by the node's index."""
        return self.index(node).lookup(message_ids, since, epoch, batch_id)

    def index(self, node: str) -> SparkSeenIndex:
        """The index of ``node``'s done ids in this inbox table, one per node."""
        if node not in self._indexes:
            self._indexes[node] = SparkSeenIndex(self, node)
        return self._indexes[node]

    def recorded(self, node: str, epoch: str, batch_id: int, done_ids: Sequence[str]) -> None:
        """The node's index adds ``done_ids`` when the marker shows up in the history, with no read of its rows."""
        self.index(node).recorded(epoch, batch_id, done_ids)

    # -- what the indexes read of the table (IndexedTable)
    def history_entries(self) -> list[Entry]:
        return self.target.history_entries()

    def seen_by_scan(self, node: str, since: dt.date, message_ids: Sequence[str], epoch: str,
                     batch_id: int) -> set[str]:
        """:meth:`seen` by a semi-join of ``message_ids`` with the node's done rows in the window (the index's hits)."""
        if not self.target.exists():
            return set()
        from pyspark.sql import functions as F

        ids = self.target.spark().createDataFrame(pa.table({"messageId": pa.array(list(message_ids), pa.string())}))
        own = (F.col("epoch") == F.lit(epoch)) & (F.col("batchId") == F.lit(batch_id))
        done = self._done(node, since).where(~own).select("messageId")
        return set(done.join(F.broadcast(ids), "messageId", "left_semi").distinct().toArrow()
                   .column("messageId").to_pylist())

    def done_ids(self, node: str, since: dt.date, batches: Sequence[tuple[str, int]] | None = None) -> list[str]:
        """The ``done`` ids of ``node`` processed since ``since`` (only of the batches ``(epoch, batchId)``, given)."""
        from pyspark.sql import functions as F

        frame = self._done(node, since)
        if batches is not None:
            which = [(F.col("epoch") == F.lit(e)) & (F.col("batchId") == F.lit(b)) for e, b in batches]
            frame = frame.where(reduce(lambda a, b: a | b, which))
        return frame.select("messageId").toArrow().column("messageId").to_pylist()

    def _done(self, node: str, since: dt.date) -> Any:
        from pyspark.sql import functions as F

        return self.target.frame().where((F.col("node") == F.lit(node)) & (F.col("processedDate") >= F.lit(
            since.isoformat())) & (F.col("status") == F.lit("done")))
