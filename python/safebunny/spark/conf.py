"""Spark session settings for streaming queries whose checkpoints are on a local disk.

:func:`local_checkpoint_conf` sets Spark's own ``FileSystemBasedCheckpointFileManager``, which starts fewer
processes per checkpoint file than the default without Hadoop's native library; :func:`use_local_checkpoints`
applies it to a ``SparkSession.builder`` or to a running session. safebunny's data source never changes a
session's settings by itself. Not for checkpoints on a cloud or distributed file system (S3, ABFS, GCS, DBFS,
HDFS, Databricks). Why and the counts: docs/performance.md ("Local checkpoints") and docs/source.md.
"""

from __future__ import annotations

from typing import Any, TypeVar

__all__ = ["CHECKPOINT_FILE_MANAGER_KEY", "LOCAL_CHECKPOINT_FILE_MANAGER", "local_checkpoint_conf",
           "use_local_checkpoints"]

CHECKPOINT_FILE_MANAGER_KEY = "spark.sql.streaming.checkpointFileManagerClass"
"""The Spark SQL setting that names the class managing a query's checkpoint files."""

LOCAL_CHECKPOINT_FILE_MANAGER = (
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager")
"""Spark's ``FileSystem``-based checkpoint file manager (its package as of Spark 4.x)."""

_Target = TypeVar("_Target")


def local_checkpoint_conf() -> dict[str, str]:
    """Session settings for queries whose checkpoints are on a local disk (see the module docstring): pass them to
    ``SparkSession.builder.config(map=...)``, merged with your own. They save most of the process starts of each
    micro-batch's offset log (``walCommit``) and commit log (``commitOffsets``) phases (docs/performance.md)."""
    return {CHECKPOINT_FILE_MANAGER_KEY: LOCAL_CHECKPOINT_FILE_MANAGER}


def use_local_checkpoints(target: _Target) -> _Target:
    """Apply :func:`local_checkpoint_conf` (local checkpoints only) to ``target`` and return it: a
    ``SparkSession.Builder`` (call this before ``getOrCreate()``) or a running ``SparkSession`` (sets the runtime
    setting; queries started afterwards use it, running ones keep theirs)."""
    if callable(getattr(target, "getOrCreate", None)) and callable(getattr(target, "config", None)):
        setting: Any = target.config  # a builder
    elif callable(getattr(getattr(target, "conf", None), "set", None)):
        setting = target.conf.set  # a running session
    else:
        raise TypeError(f"use_local_checkpoints: target must be a SparkSession.builder or a SparkSession, but got "
                        f"{type(target).__name__}: {target!r}")
    for key, value in local_checkpoint_conf().items():
        setting(key, value)
    return target
