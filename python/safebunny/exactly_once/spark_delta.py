"""Delta tables by name through Spark Delta (Databricks, or a session with delta-spark).

Thin on purpose: Spark Delta skips a replayed ``(txnAppId, txnVersion)`` by itself, for appends via
writer options and for MERGE via the session confs ``spark.databricks.delta.write.txnAppId`` /
``txnVersion`` (session-wide, so they are set and cleared around the one statement). The SQL is
built by pure functions so it is tested without Delta.

A merge's source keeps one row per key (:mod:`.merge_rows`' rule): the caller numbers the rows in the
source's order (:data:`ORDER_COLUMN`), and :func:`last_per_key_sql` keeps the highest per key.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["merge_sql", "last_per_key_sql", "quote_name", "append", "merge", "transaction_version", "TXN_APP_CONF",
           "TXN_VERSION_CONF", "ORDER_COLUMN"]

TXN_APP_CONF = "spark.databricks.delta.write.txnAppId"
TXN_VERSION_CONF = "spark.databricks.delta.write.txnVersion"
#: The column numbering a merge's source rows in the source's order (dropped before the write).
ORDER_COLUMN = "_safebunnyOrder"


def quote_name(name: str) -> str:
    """``catalog.schema.table`` -> ```catalog`.`schema`.`table``` (backticks inside doubled)."""
    return ".".join(f"`{part.replace('`', '``')}`" for part in name.split("."))


def merge_sql(table: str, source_view: str, on: Sequence[str]) -> str:
    """An upsert of the view ``source_view`` into ``table`` on the ``on`` columns."""
    condition = " AND ".join(f"t.{quote_name(k)} = s.{quote_name(k)}" for k in on)
    return (f"MERGE INTO {quote_name(table)} AS t USING {quote_name(source_view)} AS s ON {condition} "
            "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *")


def _column(name: str) -> str:
    return f"`{name.replace('`', '``')}`"


def last_per_key_sql(view: str, on: Sequence[str], columns: Sequence[str], order: str = ORDER_COLUMN) -> str:
    """The ``columns`` of ``view`` with one row per ``on`` key, the highest ``order`` winning; rows with a
    null key all kept (a null matches nothing in the merge: each is inserted)."""
    keys = ", ".join(_column(k) for k in on)
    nulls = " OR ".join(f"{_column(k)} IS NULL" for k in on)
    return (f"SELECT {', '.join(_column(c) for c in columns)} FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY "
            f"{keys} ORDER BY {_column(order)} DESC) AS `_safebunnyRank` FROM {quote_name(view)}) "
            f"WHERE `_safebunnyRank` = 1 OR {nulls}")


def append(spark: Any, df: Any, table: str, app_id: str, version: int) -> None:
    (df.write.format("delta").mode("append").option("txnAppId", app_id).option("txnVersion", str(version))
     .saveAsTable(table))


def merge(spark: Any, df: Any, table: str, on: Sequence[str], app_id: str, version: int) -> None:
    """Upsert ``df`` into ``table``; with an :data:`ORDER_COLUMN`, one row per key first (the last wins)."""
    name = f"safebunny_merge_{abs(hash((table, app_id, version)))}"
    views = [name]
    if ORDER_COLUMN in df.columns:
        df.createOrReplaceTempView(name + "_all")
        views.append(name + "_all")
        df = spark.sql(last_per_key_sql(name + "_all", on, [c for c in df.columns if c != ORDER_COLUMN]))
    try:
        if not spark.catalog.tableExists(table):
            append(spark, df, table, app_id, version)
            return
        df.createOrReplaceTempView(name)
        spark.conf.set(TXN_APP_CONF, app_id)
        spark.conf.set(TXN_VERSION_CONF, str(version))
        try:
            spark.sql(merge_sql(table, name, on))
        finally:
            spark.conf.unset(TXN_APP_CONF)
            spark.conf.unset(TXN_VERSION_CONF)
    finally:
        for view in views:
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
