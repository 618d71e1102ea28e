"""A Delta table by name (or an inbox by path given ``backend="spark"``) through the session's Spark Delta
(Databricks, or a session with delta-spark).

Thin on purpose: Spark Delta skips a replayed ``(txnAppId, txnVersion)`` by itself, for appends via
writer options and for MERGE via the session confs ``spark.databricks.delta.write.txnAppId`` /
``txnVersion`` (session-wide, so they are set and cleared around the one statement). The SQL is
built by pure functions (tested without Delta) and takes values as named parameters. Every commit carries
``userMetadata`` naming its app transaction (:func:`commit_tag`), read back from ``DESCRIBE HISTORY``
(:meth:`SparkDeltaTarget.versions`; docs/exactly-once.md, "A table given by name"). The tags and what a history
says of them are pure rules, in :mod:`.commit_tags`.

The fence for a table by name: a writer takes one app transaction per commit, so an effect commit carries its
step's lock ``(lock app id, v + 1)`` instead of its own, ``v`` the lock's version read (from the tags, which name
it: :func:`lock_in_history`) before the batch listed the claims; its own app transaction is in the tag. Delta
skips a commit whose lock version is committed already and refuses one that races a commit of the same lock
(``ConcurrentTransactionException``): a compare-and-set. A write that did not land returns False
(docs/exactly-once.md, "The fence for tables by name", says what Delta Spark 4.4.0 did).

A merge's source keeps one row per key (:mod:`.merge_rows`' rule): rows numbered in the order the step settled
them (:data:`ORDER_COLUMN`), :func:`last_per_key_sql` keeps the highest per key.
"""

from __future__ import annotations

import datetime as _dt
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pyarrow as pa

from safebunny.delta.commit_tags import History, commit_tag, lock_in_history, parse_tag, versions_in_history
from safebunny.delta.spark_history import Entry, history_cache
from safebunny.delta.spark_index import SparkSeenIndex, marker_in
from safebunny.delta.target import DeltaTarget, Guard, Prefix, is_path
from safebunny.errors import SafeBunnyError, SafeBunnyOptionError, moved_names

log = logging.getLogger("safebunny.delta")

__all__ = ["SparkDeltaTarget", "merge_sql", "name_parts", "qualified_name", "orphan_location", "last_per_key_sql",
           "quote_name", "table_ref", "maintenance_sql", "TXN_APP_CONF", "USER_METADATA_CONF"]
#: this module's names of earlier releases that moved (CHANGELOG.md)
__getattr__ = moved_names(__name__, {name: f"import {name} from safebunny.delta.commit_tags." for name in (
    "applied_in_history", "history_covers", "CLOCK_SLACK_SECONDS")})

TXN_APP_CONF = "spark.databricks.delta.write.txnAppId"
TXN_VERSION_CONF = "spark.databricks.delta.write.txnVersion"
#: The session conf that sets a commit's ``userMetadata`` for SQL statements (MERGE)
USER_METADATA_CONF = "spark.databricks.delta.commitInfo.userMetadata"
#: The column numbering a merge's source rows in the source's order (dropped before the write).
ORDER_COLUMN = "_safebunnyOrder"


def quote_name(name: str) -> str:
    """``catalog.schema.table`` -> ```catalog`.`schema`.`table``` (backticks inside doubled)."""
    return ".".join(f"`{part.replace('`', '``')}`" for part in name_parts(name))


def name_parts(name: str) -> list[str]:
    """``cat.`a.b`.t`` -> ``["cat", "a.b", "t"]``: a table name's parts, the backticks that quote a part removed
    (a doubled one inside kept as one; one inside an unquoted part is part of it)."""
    parts, part, quoted, i = [], "", False, 0
    while i < len(name):
        char = name[i]
        if char == "`" and quoted and name[i + 1:i + 2] == "`":
            part, i = part + "`", i + 2
            continue
        if char == "`" and (quoted or not part):
            quoted = not quoted
        elif char == "." and not quoted:
            parts.append(part)
            part = ""
        else:
            part += char
        i += 1
    parts.append(part)
    if quoted or not all(p.strip() for p in parts):
        raise SafeBunnyOptionError(f"The table name {name!r} is not a name Spark reads (an empty part or an unclosed "
                                   "backtick): give catalog.schema.table, schema.table or table.", "table")
    return parts


def qualified_name(parts: Sequence[str], catalog: str, database: str) -> str:
    """A table's fully qualified name, as the catalog resolves ``parts`` with the session's current ``catalog`` and
    ``database`` (one part: both added; two: the catalog): lower case, as the Hive metastore and Unity Catalog keep
    names; a part quoted where it needs it. ``db.t`` under ``spark_catalog`` and ``spark_catalog.db.t`` are one."""
    full = [*([catalog] if len(parts) < 3 else []), *([database] if len(parts) < 2 else []), *parts]
    return ".".join(p if p.replace("_", "").isalnum() else f"`{p.replace('`', '``')}`" for p in
                    (part.lower() for part in full))


_ORPHAN_ERROR = "DELTA_CREATE_TABLE_WITH_NON_EMPTY_LOCATION"


def orphan_location(message: str) -> str | None:
    """The location Delta names in its refusal to create a table by name where a log is already (a create killed
    after its first commit, before the catalog had the name); None for any other error."""
    if _ORPHAN_ERROR not in message:
        return None
    found = re.search(r"location \('([^']+)'\)", message)
    return found[1] if found else ""


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


class SparkDeltaTarget(DeltaTarget):
    """One table through the Spark session's Delta: ``table`` a name, or a path (``delta.`path```). ``spark``: its
    session (else the thread's active one); ``checked``: a write first checks that the session has Delta."""

    backend = "spark"
    fenceable = False

    def __init__(self, table: str, spark: Any = None, what: str = "The Delta table", checked: bool = False) -> None:
        self.table, self.ref = table, table_ref(table)
        self._session, self._what, self._checked = spark, what, checked
        self._indexes: dict[str, SparkSeenIndex] = {}  # an inbox's done ids per node

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

    def identity(self) -> str:
        """The catalog's fully qualified name of the table (:func:`qualified_name`); a path as it is."""
        if is_path(self.table):
            return self.table
        catalog = self.spark().catalog
        return qualified_name(name_parts(self.table), catalog.currentCatalog(), catalog.currentDatabase())

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
        for column, value in (equal or {}).items():  # values as literals: see the module docstring
            frame = frame.where(F.col(column).isin(list(value)) if isinstance(value, (list, tuple))
                                else F.col(column) == F.lit(value))
        return (frame.select(*columns) if columns else frame).toArrow()

    def schema(self) -> pa.Schema | None:
        return None  # not read from here: a row handler's batch decides its own types

    def append(self, data: pa.Table, app_id: str | None = None, version: int = 0, partition_by: Sequence[str] = (),
               fences: Sequence[tuple[str, int]] = (), guard: Guard | None = None) -> bool:
        """As :meth:`DeltaTarget.append`; ``fences``: at most one app transaction, the lock the commit carries in
        place of its own (the module's fence); False when Delta skipped or refused it."""
        return self._save(self.spark(write=True).createDataFrame(data), app_id, version, partition_by,
                          _lock(fences, self.table))

    def _save(self, df: Any, app_id: str | None, version: int, partition_by: Sequence[str] = (),
              lock: tuple[str, int] | None = None) -> bool:
        writer = df.write.format("delta").mode("append")
        if partition_by:
            writer = writer.partitionBy(*partition_by)
        if app_id is None:
            self._write(writer)
            return True
        txn, tag = lock or (app_id, version), commit_tag(app_id, version, lock)
        writer = (writer.option("txnAppId", txn[0]).option("txnVersion", str(txn[1])).option("userMetadata", tag))
        # a create by name (saveAsTable, a CTAS) ignores the writer's userMetadata: the session's conf reaches it
        spark = df.sparkSession
        spark.conf.set(USER_METADATA_CONF, tag)
        try:
            if not _compare_and_set(lambda: self._write(writer), lock):
                return False
        finally:
            spark.conf.unset(USER_METADATA_CONF)
        return lock is None or self._landed(tag)

    def _write(self, writer: Any) -> None:
        if is_path(self.table):
            writer.save(self.table)
            return
        try:
            writer.saveAsTable(self.table)
        except Exception as exc:  # noqa: BLE001 - only a create that found its own first commit is answered here
            location = orphan_location(str(exc))
            if location is None:
                raise
            self._adopt(location, exc)
            writer.saveAsTable(self.table)  # into the table now named; Delta skips the commit if it is that one

    def _adopt(self, location: str, exc: BaseException) -> None:
        """Register the log a killed create left at ``location`` under the table's name. A create by name
        (``saveAsTable``) commits version 0 at the table's location before the catalog has the name: a driver
        killed between the two leaves a log no name points to, and every later create is refused. Adopted only
        when every commit there is one of ours (tagged :func:`commit_tag`): that commit is a batch's effect or
        marker whose replay then finds it in the history and skips it, so nothing is lost or applied twice."""
        what = (f"{self._what} {self.table!r} does not exist by name, but its location {location or '(unknown)'!r} "
                "holds a Delta log")
        if not location:
            raise SafeBunnyError(f"{what}, and Delta's error does not say where ({exc}). Find the table's folder in "
                                 "the schema's location; remove it if nothing needs it, then restart.") from exc
        spark = self.spark(write=True)
        ref = f"delta.`{location.replace('`', '``')}`"
        try:
            tags = [row[0] for row in spark.sql(f"DESCRIBE HISTORY {ref}").select("userMetadata").collect()]
        except Exception as read:  # noqa: BLE001 - an unreadable log is not adopted
            raise SafeBunnyError(f"{what} that could not be read ({type(read).__name__}: {read}). Look at that folder: "
                                 "remove it if nothing needs it, or register it with CREATE TABLE "
                                 f"{quote_name(self.table)} USING delta LOCATION '<folder>', then restart.") from exc
        foreign = [tag for tag in tags if parse_tag(tag) is None]
        if not tags or foreign:
            raise SafeBunnyError(
                f"{what} with {len(foreign)} of its {len(tags)} commit(s) not made by safebunny, so it is not taken "
                f"over. If that table is the one meant, register it: CREATE TABLE {quote_name(self.table)} USING "
                f"delta LOCATION '{location}'; if not, remove the folder. Then restart.") from exc
        log.warning("%s: a create of it was cut short after its first commit (%d commit(s) of safebunny there); "
                    "registering that log under the name", what, len(tags))
        escaped = location.replace("\\", "\\\\").replace("'", "\\'")
        spark.sql(f"CREATE TABLE IF NOT EXISTS {quote_name(self.table)} USING delta LOCATION '{escaped}'")

    def merge(self, data: pa.Table, on: Sequence[str], app_id: str, version: int,
              fences: Sequence[tuple[str, int]] = (), guard: Guard | None = None) -> bool:
        """Upsert ``data``, numbered in its order first: the last row per key wins."""
        spark = self.spark(write=True)
        name = f"safebunny_merge_{abs(hash((self.table, app_id, version)))}"
        numbered = data.append_column(ORDER_COLUMN, pa.array(range(data.num_rows), pa.int64()))
        spark.createDataFrame(numbered).createOrReplaceTempView(name + "_all")
        lock = _lock(fences, self.table)
        txn, tag = lock or (app_id, version), commit_tag(app_id, version, lock)
        confs = {TXN_APP_CONF: txn[0], TXN_VERSION_CONF: str(txn[1]), USER_METADATA_CONF: tag}
        try:
            df = spark.sql(last_per_key_sql(name + "_all", on, data.column_names))
            if not self.exists():
                return self._save(df, app_id, version, lock=lock)
            df.createOrReplaceTempView(name)
            for key, value in confs.items():
                spark.conf.set(key, value)
            try:
                if not _compare_and_set(lambda: spark.sql(merge_sql(self.table, name, on)), lock):
                    return False
            finally:
                for key in confs:
                    spark.conf.unset(key)
        finally:
            for view in (name + "_all", name):
                spark.catalog.dropTempView(view)
        return lock is None or self._landed(tag)

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

    def _landed(self, tag: str) -> bool:
        """Whether a commit tagged ``tag`` is in the history: a write carrying a lock returns without a commit when
        Delta skipped it (the lock's version is committed already)."""
        return any(entry[2] == tag for entry in self.history_entries())

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
        optimize, vacuum_sql = maintenance_sql(self.ref)
        self.spark().sql(optimize)
        if vacuum:
            self.spark().sql(vacuum_sql)
        return {"compacted": None, "vacuumed": None, "swept": 0}

    def lock_in(self, history: History, lock: str) -> int | None:
        return lock_in_history(history, lock, self.table)

    def versions_in(self, history: History, apps: Mapping[str, int],
                    since: Mapping[str, float] | None = None) -> dict[str, int | None]:
        return versions_in_history(history, self.table, apps, since)

    # -- an inbox's look-ups: "seen" answered by the node's index (:mod:`.spark_index`: no read of its rows unless an
    # id was seen before, or another process wrote the table); "batch done" read from the table's history, whose
    # commits name their marker (:func:`commit_tag`), and from its rows where log cleanup cut it. Rows are read with
    # DataFrame filters of literal values (named SQL parameters are unbound with Delta's SQL extension on Spark 4.2)
    def batch_done(self, app_id: str, node: str, epoch: str, batch_id: int) -> bool:
        index = self._indexes.get(node)
        history = index.history_read_for(epoch, batch_id) if index is not None else None
        found = marker_in(self.history_entries() if history is None else history, app_id, batch_id)
        if found is not None:
            return found
        from pyspark.sql import functions as F

        mine = (F.col("node") == F.lit(node)) & (F.col("epoch") == F.lit(epoch)) & (F.col("batchId") == F.lit(batch_id))
        return bool(self.frame().where(mine).limit(1).count())

    def seen(self, node: str, since: _dt.date, message_ids: Sequence[str], epoch: str, batch_id: int) -> set[str]:
        return self.index(node).lookup(message_ids, since, epoch, batch_id)

    def index(self, node: str) -> SparkSeenIndex:
        """The index of ``node``'s done ids in this inbox table, one per node."""
        if node not in self._indexes:
            self._indexes[node] = SparkSeenIndex(self, node)
        return self._indexes[node]

    def recorded(self, node: str, epoch: str, batch_id: int, done_ids: Sequence[str]) -> None:
        """The node's index adds ``done_ids`` when the marker shows up in the history, with no read of its rows."""
        self.index(node).recorded(epoch, batch_id, done_ids)

    def seen_by_scan(self, node: str, since: _dt.date, message_ids: Sequence[str], epoch: str,
                     batch_id: int) -> set[str]:
        """:meth:`seen` by a semi-join of ``message_ids`` with the node's done rows in the window (the index's hits)."""
        if not self.exists():
            return set()
        from pyspark.sql import functions as F

        ids = self.spark().createDataFrame(pa.table({"messageId": pa.array(list(message_ids), pa.string())}))
        own = (F.col("epoch") == F.lit(epoch)) & (F.col("batchId") == F.lit(batch_id))
        done = self._done(node, since).where(~own).select("messageId")
        return set(done.join(F.broadcast(ids), "messageId", "left_semi").distinct().toArrow()
                   .column("messageId").to_pylist())

    def done_ids(self, node: str, since: _dt.date, batches: Sequence[tuple[str, int]] | None = None) -> list[str]:
        """The ``done`` ids of ``node`` processed since ``since`` (only of the batches ``(epoch, batchId)``, given)."""
        from functools import reduce

        from pyspark.sql import functions as F

        frame = self._done(node, since)
        if batches is not None:
            which = [(F.col("epoch") == F.lit(e)) & (F.col("batchId") == F.lit(b)) for e, b in batches]
            frame = frame.where(reduce(lambda a, b: a | b, which))
        return frame.select("messageId").toArrow().column("messageId").to_pylist()

    def _done(self, node: str, since: _dt.date) -> Any:
        from pyspark.sql import functions as F

        return self.frame().where((F.col("node") == F.lit(node)) & (F.col("processedDate") >= F.lit(since.isoformat()))
                                  & (F.col("status") == F.lit("done")))


def _lock(fences: Sequence[tuple[str, int]], table: str) -> tuple[str, int] | None:
    if len(fences) > 1:
        raise SafeBunnyError(f"A commit to the table {table!r} by name carries one app transaction besides its tag; "
                             f"got {len(fences)} fences ({[app for app, _ in fences]}): a bug in the caller.")
    return fences[0] if fences else None


def _compare_and_set(write: Callable[[], Any], lock: tuple[str, int] | None) -> bool:
    """Run ``write``; False when it carries ``lock`` and Delta refused it because a commit of the same app id landed
    while it ran (``ConcurrentTransactionException``: its transaction read that app id). Any other error raises."""
    try:
        write()
    except Exception as exc:  # noqa: BLE001 - only the lock's conflict is an answer; anything else is raised
        if lock is None or "DELTA_CONCURRENT_TRANSACTION" not in str(exc):
            raise
        return False
    return True


def _has_spark_delta(spark: Any) -> bool:
    extensions = spark.conf.get("spark.sql.extensions", "") or ""
    on_databricks = spark.conf.get("spark.databricks.clusterUsageTags.clusterId", None) is not None
    return "delta" in extensions.lower() or on_databricks
