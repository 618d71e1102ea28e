"""Delta Spark for a test SparkSession (the Delta Spark tier, ``make test-delta``): the shared session of
tests/conftest.py and the crash tests' driver scripts (tests/e2e/driver_session.py) build theirs with it."""

from __future__ import annotations

import glob
import os
from typing import Any

__all__ = ["with_delta"]


def with_delta(builder: Any, jars: str, metastore: str | None = None, warehouse: str | None = None) -> Any:
    """``builder`` with Delta Spark: the jars of the folder ``jars`` (``make delta-jars``), Delta's SQL extension and
    catalog, small snapshot and log-replay parallelism (a local test session), and either a Hive catalog whose
    Derby metastore and warehouse live in the folder ``metastore`` (names outlive the process) or Spark's in-memory
    catalog with its warehouse in ``warehouse``."""
    found = sorted(glob.glob(os.path.join(jars, "*.jar")))
    if not any(os.path.basename(j).startswith("delta-spark_") for j in found):
        raise RuntimeError(f"no delta-spark jar in {jars!r}: run `make delta-jars` (Maven fetches it)")
    builder = (builder.config("spark.jars", ",".join(found))
               .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
               .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
               .config("spark.databricks.delta.snapshotPartitions", "2")
               .config("spark.sql.sources.parallelPartitionDiscovery.parallelism", "2"))
    if metastore:
        os.makedirs(metastore, exist_ok=True)
        builder = (builder.enableHiveSupport()
                   .config("spark.sql.warehouse.dir", os.path.join(metastore, "warehouse"))
                   .config("spark.hadoop.javax.jdo.option.ConnectionURL",
                           f"jdbc:derby:;databaseName={os.path.join(metastore, 'metastore_db')};create=true")
                   .config("spark.driver.extraJavaOptions", f"-Dderby.system.home={metastore}"))
    elif warehouse:
        builder = builder.config("spark.sql.warehouse.dir", warehouse)
    return builder

