"""The SparkSession of the crash tests' driver scripts: a small local session, as the tests' shared one is
(``tests/conftest.py``), with Spark's default checkpoint file manager (what most users run)."""

from __future__ import annotations

from typing import Any

__all__ = ["driver_session"]


def driver_session(app: str) -> Any:
    from pyspark.sql import SparkSession

    return (SparkSession.builder.master("local[2]").appName(app)
            .config("spark.ui.enabled", "false").config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.sql.shuffle.partitions", "2").getOrCreate())
