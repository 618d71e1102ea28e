"""The SparkSession of the crash tests' driver scripts: a small local session, as the tests' shared one is
(``tests/conftest.py``), with Spark's default checkpoint file manager (what most users run).
``SAFEBUNNY_TEST_MASTER`` replaces the master, e.g. ``local-cluster[2,1,1024]``: executors in their own JVMs
and Python workers, as on a real cluster. ``SAFEBUNNY_TEST_DELTA_JARS`` (the Delta Spark tier, ``make test-delta``)
adds Delta Spark (``tests/delta_session.py``), and ``SAFEBUNNY_TEST_METASTORE`` a Hive catalog in that folder, so the
tables one driver created by name are there by name for the driver that restarts it."""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["driver_session", "run_scenarios"]


def driver_session(app: str) -> Any:
    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.master(os.environ.get("SAFEBUNNY_TEST_MASTER", "local[2]")).appName(app)
               .config("spark.ui.enabled", "false").config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.sql.shuffle.partitions", "2"))
    if os.environ.get("SPARK_SUBMIT_OPTS"):  # the driver's JVM options (tests/conftest.py), for executor JVMs too
        builder = builder.config("spark.executor.extraJavaOptions", os.environ["SPARK_SUBMIT_OPTS"])
    if os.environ.get("SAFEBUNNY_TEST_DELTA_JARS"):
        sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/
        from delta_session import with_delta

        jars, metastore = os.environ["SAFEBUNNY_TEST_DELTA_JARS"], os.environ.get("SAFEBUNNY_TEST_METASTORE")
        builder = with_delta(builder, jars, metastore)
    return builder.getOrCreate()


def run_scenarios(spark: Any, scenarios: Iterable[dict[str, Any]], run: Callable[[dict[str, Any]], None]) -> None:
    """Run each scenario in this driver, one after another: ``DRIVER-DONE <workdir>`` or ``DRIVER-FAILED
    <workdir>`` (with its trace on stderr) for each, so only a failed scenario's test fails; then stop the session
    and exit non-zero if any failed."""
    failed = False
    for scenario in scenarios:
        try:
            run(scenario)
            print("DRIVER-DONE", scenario["workdir"], flush=True)
        except Exception:  # noqa: BLE001 - reported per scenario; the next one still runs
            failed = True
            print("DRIVER-FAILED", scenario["workdir"], flush=True)
            print(f"DRIVER-FAILED {scenario['workdir']}:\n{traceback.format_exc()}", file=sys.stderr, flush=True)
    spark.stop()
    sys.exit(1 if failed else 0)
