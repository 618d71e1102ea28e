"""The SparkSession of the crash tests' driver scripts: a small local session, as the tests' shared one is
(``tests/conftest.py``), with Spark's default checkpoint file manager (what most users run).
``SAFEBUNNY_TEST_MASTER`` replaces the master, e.g. ``local-cluster[2,1,1024]``: executors in their own JVMs
and Python workers, as on a real cluster."""

from __future__ import annotations

import os
from typing import Any

__all__ = ["driver_session"]


def driver_session(app: str) -> Any:
    from pyspark.sql import SparkSession

    return (SparkSession.builder.master(os.environ.get("SAFEBUNNY_TEST_MASTER", "local[2]")).appName(app)
            .config("spark.ui.enabled", "false").config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.sql.shuffle.partitions", "2").getOrCreate())
