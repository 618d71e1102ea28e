"""The inbox on Spark Delta (Databricks, or a session with delta-spark): for a table given by name.

Thin on purpose, and the same table layout as the delta-rs backend. Spark Delta skips a replayed
``(txnAppId, txnVersion)`` append by itself, so no version check is needed before writing; "batch
done" is read from the table's rows (an empty batch that reads as not done only re-applies effects
that are idempotent anyway). The SQL is built by pure functions (tested without Delta) and run with
named parameters, so no value is ever spliced into a statement.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from safebunny.errors import SafeBunnyError
from safebunny.exactly_once.delta_rs import is_path
from safebunny.exactly_once.inbox_schema import INBOX_SCHEMA, PARTITIONS
from safebunny.exactly_once.spark_delta import quote_name

__all__ = ["SparkInboxStore", "table_ref", "seen_sql", "batch_done_sql", "rows_sql", "maintenance_sql"]


def table_ref(target: str) -> str:
    """A table name quoted (```cat`.`db`.`inbox```), or a path as ``delta.`/path```."""
    if is_path(target):
        return f"delta.`{target.replace('`', '``')}`"
    return quote_name(target)


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


def maintenance_sql(ref: str) -> list[str]:
    """Delete the node ``:node``'s partitions before ``:cutoff``, compact, vacuum with the default retention:
    in this order."""
    return [f"DELETE FROM {ref} WHERE node = :node AND processedDate < :cutoff", f"OPTIMIZE {ref}", f"VACUUM {ref}"]


class SparkInboxStore:
    """One inbox table, read and written through the active SparkSession's Delta."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.path = target
        self.ref = table_ref(target)

    def _spark(self) -> Any:
        from pyspark.sql import SparkSession

        spark = SparkSession.getActiveSession()
        if spark is None:
            raise SafeBunnyError(f"The inbox {self.target!r} is a Spark Delta table, and this thread has no active "
                                 "SparkSession. Call safebunny.activate(spark) first, or give the inbox as a path.")
        return spark

    def _exists(self, spark: Any) -> bool:
        if not is_path(self.target):
            return bool(spark.catalog.tableExists(self.target))
        from delta.tables import DeltaTable  # present wherever Spark has Delta

        return bool(DeltaTable.isDeltaTable(spark, self.target))

    def _query(self, sql: str, **args: Any) -> pa.Table | None:
        spark = self._spark()
        if not self._exists(spark):
            return None
        return spark.sql(sql, args=args).toArrow()

    def batch_done(self, app_id: str, node: str, epoch: str, batch_id: int) -> bool:
        found = self._query(batch_done_sql(self.ref), node=node, epoch=epoch, batch=batch_id)
        return found is not None and found.num_rows > 0

    def seen(self, node: str, since: dt.date, message_ids: Sequence[str], epoch: str, batch_id: int) -> set[str]:
        spark = self._spark()
        if not self._exists(spark):
            return set()
        view = f"safebunny_inbox_ids_{abs(hash((node, epoch, batch_id)))}"
        spark.createDataFrame(pa.table({"messageId": pa.array(list(message_ids), pa.string())})) \
            .createOrReplaceTempView(view)
        try:
            found = spark.sql(seen_sql(self.ref, view), args={"node": node, "since": since.isoformat(),
                                                               "epoch": epoch, "batch": batch_id}).toArrow()
        finally:
            spark.catalog.dropTempView(view)
        return set(found.column("messageId").to_pylist())

    def append(self, rows: pa.Table, app_id: str, version: int) -> bool:
        spark = self._spark()
        writer = (spark.createDataFrame(rows.cast(INBOX_SCHEMA)).write.format("delta").mode("append")
                  .partitionBy(*PARTITIONS).option("txnAppId", app_id).option("txnVersion", str(version)))
        if is_path(self.target):
            writer.save(self.target)
        else:
            writer.saveAsTable(self.target)
        return True

    def rows(self, node: str | None, correlation_id: str | None) -> pa.Table:
        args = {k: v for k, v in (("node", node), ("correlation", correlation_id)) if v is not None}
        found = self._query(rows_sql(self.ref, node is not None, correlation_id is not None), **args)
        return INBOX_SCHEMA.empty_table() if found is None else found

    def maintain(self, keep_from: dt.datetime, vacuum: bool, node: str) -> dict[str, object]:
        spark = self._spark()
        if not self._exists(spark):
            return {"deleted": 0, "compacted": 0, "vacuumed": 0, "swept": 0}
        statements = maintenance_sql(self.ref)
        spark.sql(statements[0], args={"node": node, "cutoff": keep_from.date().isoformat()})
        spark.sql(statements[1])
        if vacuum:
            spark.sql(statements[2])
        return {"deleted": None, "compacted": None, "vacuumed": None, "swept": 0}
