"""Applying a batch's Delta effects exactly once: one app transaction per (node, epoch, table)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from safebunny.errors import SafeBunnyOptionError
from safebunny.exactly_once import spark_delta
from safebunny.exactly_once.delta_rs import DeltaPath, Guard, is_path
from safebunny.exactly_once.fence import SCHEME
from safebunny.exactly_once.outcome import Effect

__all__ = ["apply_effect", "effect_app_id", "committed_versions", "target_schema"]


def effect_app_id(node: str, epoch: str, effect: Effect, scheme: int = SCHEME) -> str:
    """The app id of ``effect``'s writes: stable per node, epoch and target (``scheme`` 1: before fences,
    whose batches wrote version N; 2: version 2N + 1, fences 2N, :mod:`~safebunny.exactly_once.fence`)."""
    target = hashlib.sha1(f"{effect.kind}|{effect.table}|{','.join(effect.on)}".encode()).hexdigest()[:16]
    return f"safebunny.{'effect' if scheme < 2 else 'fx'}.{node}.{epoch}.{target}"


def apply_effect(spark: Any, effect: Effect, table: pa.Table, app_id: str, version: int,
                 fences: Sequence[tuple[str, int]] = (), guard: Guard | None = None) -> bool:
    """Write ``table`` as ``effect`` unless ``(app_id, version)`` is committed; True when written. A target
    by path also writes ``fences`` in the same commit, after ``guard`` accepted the snapshot it commits from
    (:mod:`~safebunny.exactly_once.fence`); a table by name takes neither."""
    if table.num_rows == 0:
        return False
    if is_path(effect.table):
        delta = DeltaPath(effect.table)
        if effect.kind == "append":
            return delta.append(table, app_id, version, fences=fences, guard=guard)
        return delta.merge(table, effect.on, app_id, version, fences=fences, guard=guard)
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


def committed_versions(spark: Any, effect: Effect, apps: Mapping[str, int]) -> dict[str, int | None]:
    """For each ``app_id -> version`` in ``apps``: the version of ``app_id`` in ``effect``'s table. By path,
    the last one written, all read from one snapshot of the table; by name (Spark Delta), read through the
    table's history, which only says whether ``version`` or later is in: then ``version``, else None (a
    failure to read raises: unknown is never "not applied")."""
    if not is_path(effect.table):
        return {app: version if spark_delta.transaction_applied(spark, effect.table, app, version) else None
                for app, version in apps.items()}
    table = DeltaPath(effect.table).table()
    return {app: None if table is None else table.transaction_version(app) for app in apps}


def target_schema(table: str) -> pa.Schema | None:
    """The Arrow schema of an effect's target table given by path, if it exists (``None`` for a table
    by name: a row handler's batch then decides its own types)."""
    return DeltaPath(table).arrow_schema() if is_path(table) else None


def _has_spark_delta(spark: Any) -> bool:
    extensions = spark.conf.get("spark.sql.extensions", "") or ""
    on_databricks = spark.conf.get("spark.databricks.clusterUsageTags.clusterId", None) is not None
    return "delta" in extensions.lower() or on_databricks
