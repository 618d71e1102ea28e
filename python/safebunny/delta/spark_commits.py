"""A Spark Delta target's commits with an app transaction (appends and merges that Delta skips when replayed), and
the lock an effect commit carries in place of its own app transaction (the fence for a table by name).

Thin on purpose: Spark Delta skips a replayed ``(txnAppId, txnVersion)`` by itself, for appends via writer options
and for MERGE via the session confs ``spark.databricks.delta.write.txnAppId`` / ``txnVersion`` (session-wide, so
they are set and cleared around the one statement). Every commit carries ``userMetadata`` naming its app
transaction (:func:`~safebunny.delta.commit_tags.commit_tag`), read back from ``DESCRIBE HISTORY``
(docs/exactly-once.md, "A table given by name").

The fence for a table by name: a writer takes one app transaction per commit, so an effect commit carries its
step's lock ``(lock app id, v + 1)`` instead of its own, ``v`` the lock's version read (from the tags, which name
it: :func:`~safebunny.delta.commit_tags.lock_in_history`) before the batch listed the claims; its own app
transaction is in the tag. Delta skips a commit whose lock version is committed already and refuses one that races
a commit of the same lock (``ConcurrentTransactionException``): a compare-and-set. A write that did not land
returns False (docs/exactly-once.md, "The fence for tables by name", says what Delta Spark 4.4.0 did).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa

from safebunny.delta import spark_create
from safebunny.delta.commit_tags import commit_tag
from safebunny.delta.spark_sql import ORDER_COLUMN, last_per_key_sql, merge_sql
from safebunny.delta.spark_table import SparkTable
from safebunny.errors import SafeBunnyError

__all__ = ["save", "merge", "lock_of", "compare_and_set", "TXN_APP_CONF", "TXN_VERSION_CONF", "USER_METADATA_CONF"]

TXN_APP_CONF = "spark.databricks.delta.write.txnAppId"
TXN_VERSION_CONF = "spark.databricks.delta.write.txnVersion"
#: The session conf that sets a commit's ``userMetadata`` for SQL statements (MERGE)
USER_METADATA_CONF = "spark.databricks.delta.commitInfo.userMetadata"


def save(target: SparkTable, df: Any, app_id: str | None, version: int, partition_by: Sequence[str] = (),
         lock: tuple[str, int] | None = None) -> bool:
    """Append ``df`` to ``target`` as one commit of ``(app_id, version)`` (carrying ``lock`` in its place, given);
    no ``app_id``: a plain append. False when Delta skipped or refused a commit carrying ``lock``."""
    writer = df.write.format("delta").mode("append")
    if partition_by:
        writer = writer.partitionBy(*partition_by)
    if app_id is None:
        spark_create.write(target, writer)
        return True
    txn, tag = lock or (app_id, version), commit_tag(app_id, version, lock)
    writer = (writer.option("txnAppId", txn[0]).option("txnVersion", str(txn[1])).option("userMetadata", tag))
    # a create by name (saveAsTable, a CTAS) ignores the writer's userMetadata: the session's conf reaches it
    spark = df.sparkSession
    spark.conf.set(USER_METADATA_CONF, tag)
    try:
        if not compare_and_set(lambda: spark_create.write(target, writer), lock):
            return False
    finally:
        spark.conf.unset(USER_METADATA_CONF)
    return lock is None or _landed(target, tag)


def merge(target: SparkTable, data: pa.Table, on: Sequence[str], app_id: str, version: int,
          lock: tuple[str, int] | None = None) -> bool:
    """Upsert ``data`` into ``target`` on ``on``, numbered in its order first so that the last row per key wins, as
    one commit of ``(app_id, version)`` (carrying ``lock`` in its place, given); a table not there yet is created
    by the append of those rows. False when Delta skipped or refused a commit carrying ``lock``."""
    spark = target.spark(write=True)
    name = f"safebunny_merge_{abs(hash((target.table, app_id, version)))}"
    numbered = data.append_column(ORDER_COLUMN, pa.array(range(data.num_rows), pa.int64()))
    spark.createDataFrame(numbered).createOrReplaceTempView(name + "_all")
    txn, tag = lock or (app_id, version), commit_tag(app_id, version, lock)
    confs = {TXN_APP_CONF: txn[0], TXN_VERSION_CONF: str(txn[1]), USER_METADATA_CONF: tag}
    try:
        df = spark.sql(last_per_key_sql(name + "_all", on, data.column_names))
        if not target.exists():
            return save(target, df, app_id, version, lock=lock)
        df.createOrReplaceTempView(name)
        for key, value in confs.items():
            spark.conf.set(key, value)
        try:
            if not compare_and_set(lambda: spark.sql(merge_sql(target.table, name, on)), lock):
                return False
        finally:
            for key in confs:
                spark.conf.unset(key)
    finally:
        for view in (name + "_all", name):
            spark.catalog.dropTempView(view)
    return lock is None or _landed(target, tag)


def lock_of(fences: Sequence[tuple[str, int]], table: str) -> tuple[str, int] | None:
    """The one app transaction a commit to ``table`` carries besides its tag (the lock), from a write's ``fences``."""
    if len(fences) > 1:
        raise SafeBunnyError(f"A commit to the table {table!r} by name carries one app transaction besides its tag; "
                             f"got {len(fences)} fences ({[app for app, _ in fences]}): a bug in the caller.")
    return fences[0] if fences else None


def compare_and_set(write: Callable[[], Any], lock: tuple[str, int] | None) -> bool:
    """Run ``write``; False when it carries ``lock`` and Delta refused it because a commit of the same app id landed
    while it ran (``ConcurrentTransactionException``: its transaction read that app id). Any other error raises."""
    try:
        write()
    except Exception as exc:  # noqa: BLE001 - only the lock's conflict is an answer; anything else is raised
        if lock is None or "DELTA_CONCURRENT_TRANSACTION" not in str(exc):
            raise
        return False
    return True


def _landed(target: SparkTable, tag: str) -> bool:
    """Whether a commit tagged ``tag`` is in the history: a write carrying a lock returns without a commit when
    Delta skipped it (the lock's version is committed already)."""
    return any(entry[2] == tag for entry in target.history_entries())
