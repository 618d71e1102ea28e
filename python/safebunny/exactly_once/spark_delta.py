"""Delta tables by name through Spark Delta (Databricks, or a session with delta-spark).

Thin on purpose: Spark Delta skips a replayed ``(txnAppId, txnVersion)`` by itself, for appends via
writer options and for MERGE via the session confs ``spark.databricks.delta.write.txnAppId`` /
``txnVersion`` (session-wide, so they are set and cleared around the one statement). The SQL is
built by pure functions so it is tested without Delta.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["merge_sql", "quote_name", "append", "merge", "transaction_version", "TXN_APP_CONF", "TXN_VERSION_CONF"]

TXN_APP_CONF = "spark.databricks.delta.write.txnAppId"
TXN_VERSION_CONF = "spark.databricks.delta.write.txnVersion"


def quote_name(name: str) -> str:
    """``catalog.schema.table`` -> ```catalog`.`schema`.`table``` (backticks inside doubled)."""
    return ".".join(f"`{part.replace('`', '``')}`" for part in name.split("."))


def merge_sql(table: str, source_view: str, on: Sequence[str]) -> str:
    """An upsert of the view ``source_view`` into ``table`` on the ``on`` columns."""
    condition = " AND ".join(f"t.{quote_name(k)} = s.{quote_name(k)}" for k in on)
    return (f"MERGE INTO {quote_name(table)} AS t USING {quote_name(source_view)} AS s ON {condition} "
            "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *")


def append(spark: Any, df: Any, table: str, app_id: str, version: int) -> None:
    (df.write.format("delta").mode("append").option("txnAppId", app_id).option("txnVersion", str(version))
     .saveAsTable(table))


def merge(spark: Any, df: Any, table: str, on: Sequence[str], app_id: str, version: int) -> None:
    if not spark.catalog.tableExists(table):
        append(spark, df, table, app_id, version)
        return
    view = f"safebunny_merge_{abs(hash((table, app_id, version)))}"
    df.createOrReplaceTempView(view)
    spark.conf.set(TXN_APP_CONF, app_id)
    spark.conf.set(TXN_VERSION_CONF, str(version))
    try:
        spark.sql(merge_sql(table, view, on))
    finally:
        spark.conf.unset(TXN_APP_CONF)
        spark.conf.unset(TXN_VERSION_CONF)
        spark.catalog.dropTempView(view)


def transaction_version(spark: Any, table: str, app_id: str) -> int | None:
    """The app transaction version ``app_id`` last committed to ``table`` (None: never, or no table).

    Spark SQL has no statement for it, so the table's location (``DESCRIBE DETAIL``) is read with
    delta-rs, which reads the same log; the driver needs read access to that storage.
    """
    if not spark.catalog.tableExists(table):
        return None
    location = spark.sql(f"DESCRIBE DETAIL {quote_name(table)}").select("location").first()[0]
    from safebunny.exactly_once.delta_rs import DeltaPath

    return DeltaPath(location).version_of(app_id)
