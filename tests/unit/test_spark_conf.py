"""safebunny.spark.conf: the local-checkpoint setting and where it is applied (no Spark here)."""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

import pytest

import safebunny.spark.conf as spark_conf
from safebunny.spark.conf import (
    CHECKPOINT_FILE_MANAGER_KEY,
    LOCAL_CHECKPOINT_FILE_MANAGER,
    local_checkpoint_conf,
    use_local_checkpoints,
)


class _Builder:
    """Records ``config`` calls like ``SparkSession.Builder`` (which returns itself)."""

    def __init__(self) -> None:
        self.options: dict[str, str] = {}

    def config(self, key: str, value: str) -> _Builder:
        self.options[key] = value
        return self

    def getOrCreate(self) -> Any:  # noqa: N802 - PySpark's name
        raise AssertionError("use_local_checkpoints must not start the session")


class _RuntimeConf:
    def __init__(self) -> None:
        self.values: dict[str, str] = {}

    def set(self, key: str, value: str) -> None:
        self.values[key] = value


class _Session:
    def __init__(self) -> None:
        self.conf = _RuntimeConf()


def test_public_names() -> None:
    assert spark_conf.__all__ == [
        "CHECKPOINT_FILE_MANAGER_KEY", "LOCAL_CHECKPOINT_FILE_MANAGER",
        "local_checkpoint_conf", "use_local_checkpoints",
    ]


def test_conf_names_spark_filesystem_based_manager() -> None:
    assert local_checkpoint_conf() == {
        "spark.sql.streaming.checkpointFileManagerClass":
            "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager",
    }
    conf = local_checkpoint_conf()
    conf.clear()  # a fresh dict each call: a caller merging into it changes nothing here
    assert local_checkpoint_conf() == {CHECKPOINT_FILE_MANAGER_KEY: LOCAL_CHECKPOINT_FILE_MANAGER}


def test_class_exists_in_installed_spark() -> None:
    """The class name is Spark 4.x's package; a rename in a Spark upgrade fails here, not at query start."""
    pyspark = pytest.importorskip("pyspark")
    jars = sorted((Path(pyspark.__file__).parent / "jars").glob("spark-sql_2.13-*.jar"))
    assert jars, "no spark-sql jar in the installed pyspark"
    entry = LOCAL_CHECKPOINT_FILE_MANAGER.replace(".", "/") + ".class"
    with zipfile.ZipFile(jars[0]) as jar:
        assert entry in jar.namelist()


def test_applies_to_a_builder_and_returns_it() -> None:
    builder = _Builder()
    assert use_local_checkpoints(builder) is builder
    assert builder.options == local_checkpoint_conf()


def test_applies_to_a_running_session() -> None:
    session = _Session()
    assert use_local_checkpoints(session) is session
    assert session.conf.values == local_checkpoint_conf()


@pytest.mark.parametrize("target", [None, "local[2]", {"spark.master": "local"}])
def test_refuses_anything_else(target: Any) -> None:
    with pytest.raises(TypeError, match=r"must be a SparkSession.builder or a SparkSession, but got"):
        use_local_checkpoints(target)
