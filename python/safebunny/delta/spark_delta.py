"""A Delta table by name (or an inbox by path given ``backend="spark"``) through the session's Spark Delta
(Databricks, or a session with delta-spark).

Thin on purpose: Spark Delta skips a replayed ``(txnAppId, txnVersion)`` by itself, for appends via
writer options and for MERGE via the session confs ``spark.databricks.delta.write.txnAppId`` /
``txnVersion`` (session-wide, so they are set and cleared around the one statement). The SQL is
built by pure functions (tested without Delta) and takes values as named parameters. Every commit carries
``userMetadata`` naming its app transaction (:func:`commit_tag`), read back from ``DESCRIBE HISTORY``
(:meth:`SparkDeltaTarget.versions`; docs/exactly-once.md, "A table given by name").

A merge's source keeps one row per key (:mod:`.merge_rows`' rule): its rows are numbered in the order the
step settled them (:data:`ORDER_COLUMN`), and :func:`last_per_key_sql` keeps the highest per key.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pyarrow as pa

from safebunny.delta.target import DeltaTarget, Guard, is_path
from safebunny.errors import SafeBunnyError, SafeBunnyOptionError

__all__ = ["SparkDeltaTarget", "merge_sql", "last_per_key_sql", "quote_name", "table_ref", "maintenance_sql",
           "commit_tag", "applied_in_history", "history_covers", "TXN_APP_CONF", "USER_METADATA_CONF"]

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


def table_ref(target: str) -> str:
    """A table name quoted (```cat`.`db`.`inbox```), or a path as ``delta.`/path```."""
    if is_path(target):
        return f"delta.`{target.replace('`', '``')}`"
    return quote_name(target)


def maintenance_sql(ref: str) -> list[str]:
    """Compact, then vacuum with the default retention (after :meth:`SparkDeltaTarget.delete_before`)."""
    return [f"OPTIMIZE {ref}", f"VACUUM {ref}"]


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


#: slack for the clocks of the driver that wrote a claim and of the storage that stamps the history
CLOCK_SLACK_SECONDS = 600.0


def history_covers(history: Sequence[tuple[int, Any, Any]], since: float) -> bool:
    """Whether ``history`` (``(version, timestamp, userMetadata)`` rows of ``DESCRIBE HISTORY``) holds every commit
    made after the unix time ``since``: nothing was ever cleaned (version 0 is there), or its oldest entry is older
    than ``since`` by more than :data:`CLOCK_SLACK_SECONDS`."""
    version, at, _tag = min(history, key=lambda entry: entry[0])
    if version == 0:
        return True
    stamp = at.timestamp() if isinstance(at, _dt.datetime) else float(at)  # PySpark gives naive local time
    return stamp <= since - CLOCK_SLACK_SECONDS


def _utc(when: float) -> str:
    return _dt.datetime.fromtimestamp(when, _dt.timezone.utc).isoformat(timespec="seconds")


class SparkDeltaTarget(DeltaTarget):
    """One table through the Spark session's Delta: ``table`` a name, or a path (``delta.`path```). ``spark``: its
    session (else the thread's active one); ``checked``: a write first checks that the session has Delta."""

    backend = "spark"
    fenceable = False

    def __init__(self, table: str, spark: Any = None, what: str = "The Delta table", checked: bool = False) -> None:
        self.table, self.ref = table, table_ref(table)
        self._session, self._what, self._checked = spark, what, checked

    def spark(self, write: bool = False) -> Any:
        from pyspark.sql import SparkSession

        spark = self._session if self._session is not None else SparkSession.getActiveSession()
        if spark is None:
            raise SafeBunnyError(f"{self._what} {self.table!r} is a Spark Delta table, and this thread has no "
                                 "active SparkSession. Call safebunny.activate(spark) first, or give it as a path.")
        if write and self._checked and not _has_spark_delta(spark):
            raise SafeBunnyOptionError(
                f"{self._what} {self.table!r} is a name, which needs Delta in the Spark session (Databricks, or "
                "delta-spark); this session has none. Give a path (written with delta-rs) instead.", "table")
        return spark

    def exists(self) -> bool:
        if not is_path(self.table):
            return bool(self.spark().catalog.tableExists(self.table))
        from delta.tables import DeltaTable  # present wherever Spark has Delta

        return bool(DeltaTable.isDeltaTable(self.spark(), self.table))

    def frame(self) -> Any:
        """The table as a DataFrame of the session (by name, or by path); filter it with literal columns."""
        spark = self.spark()
        return spark.read.format("delta").load(self.table) if is_path(self.table) else spark.table(self.table)

    def delta_table(self) -> Any:
        """The table as delta-spark's ``DeltaTable`` (its ``delete`` takes a Column: values as literals)."""
        from delta.tables import DeltaTable  # present wherever Spark has Delta

        spark = self.spark()
        return DeltaTable.forPath(spark, self.table) if is_path(self.table) else DeltaTable.forName(spark, self.table)

    def read(self, equal: Mapping[str, Any] | None = None, columns: Sequence[str] | None = None) -> pa.Table | None:
        if not self.exists():
            return None
        from pyspark.sql import functions as F

        frame = self.frame()
        for column, value in (equal or {}).items():  # values as literals: see the module docstring
            frame = frame.where(F.col(column).isin(list(value)) if isinstance(value, (list, tuple))
                                else F.col(column) == F.lit(value))
        return (frame.select(*columns) if columns else frame).toArrow()

    def schema(self) -> pa.Schema | None:
        return None  # not read from here: a row handler's batch decides its own types

    def append(self, data: pa.Table, app_id: str | None = None, version: int = 0, partition_by: Sequence[str] = (),
               fences: Sequence[tuple[str, int]] = (), guard: Guard | None = None) -> bool:
        self._save(self.spark(write=True).createDataFrame(data), app_id, version, partition_by)
        return True

    def _save(self, df: Any, app_id: str | None, version: int, partition_by: Sequence[str] = ()) -> None:
        writer = df.write.format("delta").mode("append")
        if partition_by:
            writer = writer.partitionBy(*partition_by)
        if app_id is None:
            self._write(writer)
            return
        writer = (writer.option("txnAppId", app_id).option("txnVersion", str(version))
                  .option("userMetadata", commit_tag(app_id, version)))
        # the commit that creates a table by name (saveAsTable: CREATE TABLE AS SELECT) ignores the writer's
        # userMetadata option and records none; the session conf reaches it (the session is the batch's own)
        spark = df.sparkSession
        spark.conf.set(USER_METADATA_CONF, commit_tag(app_id, version))
        try:
            self._write(writer)
        finally:
            spark.conf.unset(USER_METADATA_CONF)

    def _write(self, writer: Any) -> None:
        if is_path(self.table):
            writer.save(self.table)
        else:
            writer.saveAsTable(self.table)

    def merge(self, data: pa.Table, on: Sequence[str], app_id: str, version: int,
              fences: Sequence[tuple[str, int]] = (), guard: Guard | None = None) -> bool:
        """Upsert ``data``, numbered in its order first: the last row per key wins."""
        spark = self.spark(write=True)
        name = f"safebunny_merge_{abs(hash((self.table, app_id, version)))}"
        numbered = data.append_column(ORDER_COLUMN, pa.array(range(data.num_rows), pa.int64()))
        spark.createDataFrame(numbered).createOrReplaceTempView(name + "_all")
        confs = {TXN_APP_CONF: app_id, TXN_VERSION_CONF: str(version), USER_METADATA_CONF: commit_tag(app_id, version)}
        try:
            df = spark.sql(last_per_key_sql(name + "_all", on, data.column_names))
            if not self.exists():
                self._save(df, app_id, version)
                return True
            df.createOrReplaceTempView(name)
            for key, value in confs.items():
                spark.conf.set(key, value)
            try:
                spark.sql(merge_sql(self.table, name, on))
            finally:
                for key in confs:
                    spark.conf.unset(key)
        finally:
            for view in (name + "_all", name):
                spark.catalog.dropTempView(view)
        return True

    def versions(self, apps: Mapping[str, int], since: Mapping[str, float] | None = None) -> dict[str, int | None]:
        """Read through Spark (``DESCRIBE HISTORY``, which works where only the catalog gives access), once for all
        ``apps``; no table: nothing was written to it. Any failure to read raises :class:`SafeBunnyError`: the
        answer is unknown, and guessing "not applied" would apply the effect twice. So does a history that log
        cleanup (``delta.logRetentionDuration``, 30 days by default) cut after ``since[app]`` (:func:`history_covers`):
        the commit may have been among those removed."""
        try:
            history = ([(row[0], row[1], row[2]) for row in self.spark().sql(f"DESCRIBE HISTORY {self.ref}")
                        .select("version", "timestamp", "userMetadata").collect()] if apps and self.exists() else [])
        except Exception as exc:  # noqa: BLE001 - unknown is never "not applied"
            raise SafeBunnyError(
                f"Could not read the history of the effect table {self.table!r} to tell whether an earlier batch "
                f"applied {dict(apps)} ({type(exc).__name__}: {exc}). The batch fails and is replayed; give the "
                "driver's identity SELECT on the table (DESCRIBE HISTORY needs it).") from exc
        tags = [tag for _version, _at, tag in history]
        found = {app: version if applied_in_history(tags, app, version) else None for app, version in apps.items()}
        for app, when in (since or {}).items():
            if found.get(app) is None and history and not history_covers(history, when):
                oldest = min(history, key=lambda entry: entry[0])
                raise SafeBunnyError(
                    f"The history of the effect table {self.table!r} starts at version {oldest[0]} ({oldest[1]}), "
                    f"after the batch that claimed these messages ({_utc(when)}): log cleanup "
                    "(delta.logRetentionDuration) removed the commits that would tell whether it applied "
                    f"{app!r}, so this is unknown and nothing is applied. Check the table for that batch's rows; "
                    "if they are there or must be applied, remove its claim file under the step's state location "
                    "(_claims) and restart. Keep delta.logRetentionDuration longer than a step can stay stopped.")
        return found

    def delete_before(self, node: str, column: str, before: str) -> int | None:
        if not self.exists():
            return 0
        from pyspark.sql import functions as F

        self.delta_table().delete((F.col("node") == F.lit(node)) & (F.col(column) < F.lit(before)))
        return None

    def compact(self, vacuum: bool = True) -> dict[str, Any]:
        if not self.exists():
            return {"compacted": 0, "vacuumed": 0, "swept": 0}
        optimize, vacuum_sql = maintenance_sql(self.ref)
        self.spark().sql(optimize)
        if vacuum:
            self.spark().sql(vacuum_sql)
        return {"compacted": None, "vacuumed": None, "swept": 0}


def _has_spark_delta(spark: Any) -> bool:
    extensions = spark.conf.get("spark.sql.extensions", "") or ""
    on_databricks = spark.conf.get("spark.databricks.clusterUsageTags.clusterId", None) is not None
    return "delta" in extensions.lower() or on_databricks
