"""A Delta table by name (or an inbox by path given ``backend="spark"``) through the session's Spark Delta
(Databricks, or a session with delta-spark).

The target itself: its session, identity, reads, history and maintenance. Its commits with an app transaction, and
the lock an effect commit by name carries, are :mod:`.spark_commits`'; a create by name and the take-over of one cut
short, :mod:`.spark_create`'s; its SQL and names, pure, :mod:`.spark_sql`'s; an inbox's look-ups on it,
:mod:`.spark_inbox`'s. Every commit carries ``userMetadata`` naming its app transaction, read back from
``DESCRIBE HISTORY`` (:meth:`SparkDeltaTarget.versions`; docs/exactly-once.md, "A table given by name"); the tags
and what a history says of them are pure rules, in :mod:`.commit_tags`.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from safebunny.delta import spark_commits, spark_sql
from safebunny.delta.commit_tags import History, lock_in_history, versions_in_history
from safebunny.delta.spark_history import Entry, history_cache
from safebunny.delta.spark_inbox import SparkInbox
from safebunny.delta.target import DeltaTarget, Guard, Prefix, is_path
from safebunny.errors import SafeBunnyError, SafeBunnyOptionError, moved_names

__all__ = ["SparkDeltaTarget"]
#: this module's names of earlier releases that moved (CHANGELOG.md)
__getattr__ = moved_names(__name__, {
    **{name: f"import {name} from safebunny.delta.commit_tags." for name in (
        "applied_in_history", "history_covers", "CLOCK_SLACK_SECONDS")},
    **{name: f"import {name} from safebunny.delta.spark_sql." for name in (
        "merge_sql", "name_parts", "qualified_name", "last_per_key_sql", "quote_name", "table_ref", "maintenance_sql",
        "ORDER_COLUMN")},
    **{name: f"import {name} from safebunny.delta.spark_commits." for name in (
        "TXN_APP_CONF", "TXN_VERSION_CONF", "USER_METADATA_CONF")},
    "orphan_location": "import orphan_location from safebunny.delta.spark_create."})


class SparkDeltaTarget(DeltaTarget):
    """One table through the Spark session's Delta: ``table`` a name, or a path (``delta.`path```). ``spark``: its
    session (else the thread's active one); ``checked``: a write first checks that the session has Delta. It is the
    :class:`~safebunny.delta.spark_table.SparkTable` its parts are given."""

    backend = "spark"
    fenceable = False

    def __init__(self, table: str, spark: Any = None, what: str = "The Delta table", checked: bool = False) -> None:
        self.table, self.ref, self.what = table, spark_sql.table_ref(table), what
        self._session, self._checked = spark, checked
        self.inbox = SparkInbox(self)

    def spark(self, write: bool = False) -> Any:
        from pyspark.sql import SparkSession

        spark = self._session if self._session is not None else SparkSession.getActiveSession()
        if spark is None:
            raise SafeBunnyError(f"{self.what} {self.table!r} is a Spark Delta table, and this thread has no "
                                 "active SparkSession. Call safebunny.activate(spark) first, or give it as a path.")
        if write and self._checked and not _has_spark_delta(spark):
            raise SafeBunnyOptionError(
                f"{self.what} {self.table!r} is a name, which needs Delta in the Spark session (Databricks, or "
                "delta-spark); this session has none. Give a path (written with delta-rs) instead.", "table")
        return spark

    def identity(self) -> str:
        """The catalog's fully qualified name of the table (:func:`.spark_sql.qualified_name`); a path as it is."""
        if is_path(self.table):
            return self.table
        catalog = self.spark().catalog
        return spark_sql.qualified_name(spark_sql.name_parts(self.table), catalog.currentCatalog(),
                                        catalog.currentDatabase())

    def exists(self) -> bool:
        if not is_path(self.table):
            return bool(self.spark().catalog.tableExists(self.table))
        from delta.tables import DeltaTable  # present wherever Spark has Delta

        return bool(DeltaTable.isDeltaTable(self.spark(), self.table))

    def frame(self) -> Any:
        """The table as a DataFrame of the session (by name, or by path); filter it with literal columns."""
        spark = self.spark()
        return spark.read.format("delta").load(self.table) if is_path(self.table) else spark.table(self.table)

    def read(self, equal: Mapping[str, Any] | None = None, columns: Sequence[str] | None = None) -> pa.Table | None:
        if not self.exists():
            return None
        from pyspark.sql import functions as F

        frame = self.frame()
        for column, value in (equal or {}).items():  # values as literals (see :mod:`.spark_inbox`)
            frame = frame.where(F.col(column).isin(list(value)) if isinstance(value, (list, tuple))
                                else F.col(column) == F.lit(value))
        return (frame.select(*columns) if columns else frame).toArrow()

    def schema(self) -> pa.Schema | None:
        return None  # not read from here: a row handler's batch decides its own types

    def append(self, data: pa.Table, app_id: str | None = None, version: int = 0, partition_by: Sequence[str] = (),
               fences: Sequence[tuple[str, int]] = (), guard: Guard | None = None) -> bool:
        """As :meth:`DeltaTarget.append`; ``fences``: at most one app transaction, the lock the commit carries in
        place of its own (:mod:`.spark_commits`' fence); False when Delta skipped or refused it."""
        df = self.spark(write=True).createDataFrame(data)
        return spark_commits.save(self, df, app_id, version, partition_by, spark_commits.lock_of(fences, self.table))

    def merge(self, data: pa.Table, on: Sequence[str], app_id: str, version: int,
              fences: Sequence[tuple[str, int]] = (), guard: Guard | None = None) -> bool:
        """Upsert ``data``, numbered in its order first: the last row per key wins."""
        return spark_commits.merge(self, data, on, app_id, version, spark_commits.lock_of(fences, self.table))

    def versions(self, apps: Mapping[str, int], since: Mapping[str, float] | None = None) -> dict[str, int | None]:
        """Read through Spark (``DESCRIBE HISTORY``, which works where only the catalog gives access), once for all
        ``apps``; no table: nothing was written to it. Any failure to read raises :class:`SafeBunnyError`: the
        answer is unknown, and guessing "not applied" would apply the effect twice. So does a history that log
        cleanup (``delta.logRetentionDuration``, 30 days by default) cut after ``since[app]``
        (:func:`~safebunny.delta.commit_tags.history_covers`): the commit may have been among those removed."""
        return versions_in_history(self.history() if apps else [], self.table, apps, since)

    def history(self) -> History:
        """The table's whole ``DESCRIBE HISTORY`` (empty without a table); a failure to read raises."""
        try:
            return [entry[:3] for entry in self.history_entries()]
        except Exception as exc:  # noqa: BLE001 - unknown is never "not applied"
            raise SafeBunnyError(
                f"Could not read the history of the effect table {self.table!r} to tell what earlier batches "
                f"applied there ({type(exc).__name__}: {exc}). The batch fails and is replayed; give the "
                "driver's identity SELECT on the table (DESCRIBE HISTORY needs it).") from exc

    def history_entries(self) -> list[Entry]:
        """The table's history with each commit's operation, newest first (empty without a table), read through the
        process's cache of it (:mod:`.spark_history`: only the commits that are new since the last read)."""
        cache = history_cache(self.ref)
        if not self.exists():
            cache.forget()
            return []
        return cache.read(self.spark())

    def delete_before(self, node: str, column: str, before: str, starting: Prefix | None = None) -> int | None:
        if not self.exists():
            return 0
        from delta.tables import DeltaTable  # present wherever Spark has Delta
        from pyspark.sql import functions as F

        spark = self.spark()
        table = DeltaTable.forPath(spark, self.table) if is_path(self.table) else DeltaTable.forName(spark, self.table)
        condition = (F.col("node") == F.lit(node)) & (F.col(column) < F.lit(before))  # a Column: values as literals
        if starting is not None:
            begins = F.col(starting[0]).startswith(F.lit(starting[1]))
            condition &= begins if starting[2] else ~begins
        table.delete(condition)
        return None

    def compact(self, vacuum: bool = True) -> dict[str, Any]:
        if not self.exists():
            return {"compacted": 0, "vacuumed": 0, "swept": 0}
        optimize, vacuum_sql = spark_sql.maintenance_sql(self.ref)
        self.spark().sql(optimize)
        if vacuum:
            self.spark().sql(vacuum_sql)
        return {"compacted": None, "vacuumed": None, "swept": 0}

    def lock_in(self, history: History, lock: str) -> int | None:
        return lock_in_history(history, lock, self.table)

    def versions_in(self, history: History, apps: Mapping[str, int],
                    since: Mapping[str, float] | None = None) -> dict[str, int | None]:
        return versions_in_history(history, self.table, apps, since)

    # -- an inbox's look-ups (:mod:`.spark_inbox`)
    def batch_done(self, app_id: str, node: str, epoch: str, batch_id: int) -> bool:
        return self.inbox.batch_done(app_id, node, epoch, batch_id)

    def seen(self, node: str, since: _dt.date, message_ids: Sequence[str], epoch: str, batch_id: int) -> set[str]:
        return self.inbox.seen(node, since, message_ids, epoch, batch_id)

    def recorded(self, node: str, epoch: str, batch_id: int, done_ids: Sequence[str]) -> None:
        self.inbox.recorded(node, epoch, batch_id, done_ids)


def _has_spark_delta(spark: Any) -> bool:
    extensions = spark.conf.get("spark.sql.extensions", "") or ""
    on_databricks = spark.conf.get("spark.databricks.clusterUsageTags.clusterId", None) is not None
    return "delta" in extensions.lower() or on_databricks
