"""Applying a batch's Delta effects exactly once: one app transaction per (node, epoch, table)."""

from __future__ import annotations

import hashlib
from typing import Any

import pyarrow as pa

from safebunny.errors import SafeBunnyOptionError
from safebunny.exactly_once import spark_delta
from safebunny.exactly_once.delta_rs import DeltaPath, is_path
from safebunny.exactly_once.outcome import Effect

__all__ = ["apply_effect", "effect_app_id", "effect_applied", "target_schema"]


def effect_app_id(node: str, epoch: str, effect: Effect) -> str:
    """The app id of ``effect``'s writes: stable per node, epoch and target."""
    target = hashlib.sha1(f"{effect.kind}|{effect.table}|{','.join(effect.on)}".encode()).hexdigest()[:16]
    return f"safebunny.effect.{node}.{epoch}.{target}"


def apply_effect(spark: Any, effect: Effect, table: pa.Table, app_id: str, version: int) -> bool:
    """Write ``table`` as ``effect`` unless ``(app_id, version)`` is committed; True when written."""
    if table.num_rows == 0:
        return False
    if is_path(effect.table):
        delta = DeltaPath(effect.table)
        if effect.kind == "append":
            return delta.append(table, app_id, version)
        return delta.merge(table, effect.on, app_id, version)
    if not _has_spark_delta(spark):
        raise SafeBunnyOptionError(
            f"The effect table {effect.table!r} is a name, which needs Delta in the Spark session (Databricks, "
            "or delta-spark); this session has none. Give a path (written with delta-rs) instead.", "table")
    if effect.kind == "append":
        spark_delta.append(spark, spark.createDataFrame(table), effect.table, app_id, version)
    else:  # rows numbered in the order the step settled them: the merge keeps the last per key
        numbered = table.append_column(spark_delta.ORDER_COLUMN, pa.array(range(table.num_rows), pa.int64()))
        spark_delta.merge(spark, spark.createDataFrame(numbered), effect.table, effect.on, app_id, version)
    return True


def effect_applied(spark: Any, effect: Effect, app_id: str, version: int) -> bool:
    """Whether ``(app_id, version)`` (or a later version of ``app_id``) is committed in ``effect``'s table."""
    if not is_path(effect.table):  # through Spark: the table's history, which fails loudly when unreadable
        return spark_delta.transaction_applied(spark, effect.table, app_id, version)
    committed = DeltaPath(effect.table).version_of(app_id)
    return committed is not None and committed >= version


def target_schema(table: str) -> pa.Schema | None:
    """The Arrow schema of an effect's target table given by path, if it exists (``None`` for a table
    by name: a row handler's batch then decides its own types)."""
    return DeltaPath(table).arrow_schema() if is_path(table) else None


def _has_spark_delta(spark: Any) -> bool:
    extensions = spark.conf.get("spark.sql.extensions", "") or ""
    on_databricks = spark.conf.get("spark.databricks.clusterUsageTags.clusterId", None) is not None
    return "delta" in extensions.lower() or on_databricks
