"""Delta tables by name through Spark Delta (Databricks, or a session with delta-spark).

Thin on purpose: Spark Delta skips a replayed ``(txnAppId, txnVersion)`` by itself, for appends via
writer options and for MERGE via the session confs ``spark.databricks.delta.write.txnAppId`` /
``txnVersion`` (session-wide, so they are set and cleared around the one statement). The SQL is
built by pure functions so it is tested without Delta.

Every effect commit also carries ``userMetadata`` naming its app transaction (:func:`commit_tag`), so
whether an orphaned batch applied an effect is read through Spark from the table's history
(``DESCRIBE HISTORY``), which Unity Catalog allows on managed tables whose storage the driver cannot
read (:func:`transaction_applied`). A history that cannot be read is "unknown": the batch fails loudly,
never counts the effect as not applied.

A merge's source keeps one row per key (:mod:`.merge_rows`' rule): the caller numbers the rows in the
source's order (:data:`ORDER_COLUMN`), and :func:`last_per_key_sql` keeps the highest per key.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from safebunny.errors import SafeBunnyError

__all__ = ["merge_sql", "last_per_key_sql", "quote_name", "append", "merge", "transaction_applied", "commit_tag",
           "applied_in_history", "TXN_APP_CONF", "TXN_VERSION_CONF", "USER_METADATA_CONF", "ORDER_COLUMN"]

TXN_APP_CONF = "spark.databricks.delta.write.txnAppId"
TXN_VERSION_CONF = "spark.databricks.delta.write.txnVersion"
#: The session conf that sets a commit's ``userMetadata`` for SQL statements (MERGE)
USER_METADATA_CONF = "spark.databricks.delta.commitInfo.userMetadata"
_TAG_PREFIX = "safebunny.txn "
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


def commit_tag(app_id: str, version: int) -> str:
    """The ``userMetadata`` of an effect commit: its app transaction, readable in the table's history."""
    return f"{_TAG_PREFIX}{app_id} {version}"


def applied_in_history(user_metadata: Iterable[str | None], app_id: str, version: int) -> bool:
    """Whether the history's ``userMetadata`` values show ``app_id`` committed at ``version`` or later."""
    prefix = f"{_TAG_PREFIX}{app_id} "
    for value in user_metadata:
        if value and value.startswith(prefix):
            tail = value[len(prefix):]
            if tail.isdigit() and int(tail) >= version:
                return True
    return False


def append(spark: Any, df: Any, table: str, app_id: str, version: int) -> None:
    (df.write.format("delta").mode("append").option("txnAppId", app_id).option("txnVersion", str(version))
     .option("userMetadata", commit_tag(app_id, version)).saveAsTable(table))


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
        confs = {TXN_APP_CONF: app_id, TXN_VERSION_CONF: str(version), USER_METADATA_CONF: commit_tag(app_id, version)}
        for key, value in confs.items():
            spark.conf.set(key, value)
        try:
            spark.sql(merge_sql(table, name, on))
        finally:
            for key in confs:
                spark.conf.unset(key)
    finally:
        for view in views:
            spark.catalog.dropTempView(view)


def transaction_applied(spark: Any, table: str, app_id: str, version: int) -> bool:
    """Whether ``table``'s history holds an effect commit of ``app_id`` at ``version`` or later (False when
    the table does not exist: nothing was written to it). Read through Spark (``DESCRIBE HISTORY``), so
    it works where only the catalog gives access; any failure to read raises :class:`SafeBunnyError`:
    the answer is unknown, and guessing "not applied" would apply the effect twice."""
    try:
        if not spark.catalog.tableExists(table):
            return False
        history = spark.sql(f"DESCRIBE HISTORY {quote_name(table)}").select("userMetadata").collect()
    except Exception as exc:  # noqa: BLE001 - unknown is never "not applied"
        raise SafeBunnyError(
            f"Could not read the history of the effect table {table!r} to tell whether an earlier batch applied "
            f"{app_id!r} version {version} ({type(exc).__name__}: {exc}). The batch fails and is replayed; give "
            "the driver's identity SELECT on the table (DESCRIBE HISTORY needs it).") from exc
    return applied_in_history((row[0] for row in history), app_id, version)
