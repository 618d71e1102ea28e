"""The deterministic-id function on the JVM (the Scala shim) against the Python one inside Spark.

    python -m bench.bench_ids [--rows 1000000] [--repeat 3] [--partitions 2] [--json out.json]

Computes ``message_id(concat('order-', id), 'billing', 'InvoiceRequested', id % 5)`` for every
row of ``spark.range(rows)`` and writes the result to Spark's ``noop`` sink (so every row is
computed and nothing is pruned), with:

* ``jvm``: ``safebunny_message_id`` from the shim (a Scala UDF; no Python worker);
* ``builtin_sha1``: Spark's own code-generated ``sha1`` of the joined fields, not an id: the
  floor of what any JVM-side hashing of these rows can cost here;
* ``python_udf``: ``safebunny.ids.message_id`` as a plain row-at-a-time Python UDF;
* ``pandas_udf``: the same as a vectorised (Arrow) pandas UDF;
* ``python_loop``: the Python function in a plain loop, no Spark (what one core does).

Reports the median wall time of ``repeat`` runs (after one warm-up run of each) as rows/s, and
the ratio of the JVM rate to each other rate. The first run builds the shim if needed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import pandas as pd  # module level: pandas_udf resolves the string annotations in globals

__all__ = ["main", "run"]

_CAUSE = "concat('order-', CAST(id AS STRING))"


def _session(partitions: int) -> Any:
    from pyspark.sql import SparkSession

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    return (
        SparkSession.builder.master(f"local[{partitions}]")
        .appName("safebunny-bench-ids")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", str(partitions))
        .getOrCreate()
    )


def _cases(spark: Any, rows: int, partitions: int) -> dict[str, Callable[[], None]]:
    from pyspark.sql import functions as F
    from pyspark.sql.functions import pandas_udf, udf

    import safebunny.spark.shim
    from safebunny.ids import message_id

    safebunny.spark.shim.register(spark)
    base = spark.range(0, rows, 1, partitions).selectExpr(f"{_CAUSE} AS c", "'billing' AS n",
                                                          "'InvoiceRequested' AS t", "id % 5 AS i")

    @udf("string")
    def py_id(c, n, t, i):  # no type hints: pyspark 4 would try to infer an Arrow UDF from them
        return message_id(c, n, t, i)

    @pandas_udf("string")
    def pandas_id(c: pd.Series, n: pd.Series, t: pd.Series, i: pd.Series) -> pd.Series:
        return pd.Series([message_id(*row) for row in zip(c, n, t, i.tolist(), strict=True)])

    def sink(df: Any) -> Callable[[], None]:
        return lambda: df.write.format("noop").mode("overwrite").save()

    cols = [F.col("c"), F.col("n"), F.col("t"), F.col("i")]
    return {
        "jvm": sink(base.selectExpr("safebunny_message_id(c, n, t, i) AS id")),
        "builtin_sha1": sink(base.selectExpr("sha1(concat_ws('|', c, n, t, CAST(i AS STRING))) AS id")),
        "python_udf": sink(base.select(py_id(*cols).alias("id"))),
        "pandas_udf": sink(base.select(pandas_id(*cols).alias("id"))),
    }


def _python_loop(rows: int) -> Callable[[], None]:
    from safebunny.ids import message_id

    def loop() -> None:
        for k in range(rows):
            message_id(f"order-{k}", "billing", "InvoiceRequested", k % 5)

    return loop


def _check_same_ids(spark: Any) -> None:
    """The JVM and Python ids agree on the benchmark's own rows (a benchmark of wrong ids is worthless)."""
    from safebunny.ids import message_id

    got = spark.range(0, 1000, 1, 2).selectExpr(
        "id", f"safebunny_message_id({_CAUSE}, 'billing', 'InvoiceRequested', id % 5) AS m").collect()
    bad = [r.id for r in got if r.m != message_id(f"order-{r.id}", "billing", "InvoiceRequested", r.id % 5)]
    if bad:
        raise RuntimeError(f"the JVM ids differ from the Python ids for ids {bad[:5]}")


def run(rows: int = 1_000_000, repeat: int = 3, partitions: int = 2, loop_rows: int = 200_000) -> dict[str, Any]:
    """Run every case; returns ``{"rows", "cases": {name: {"seconds", "rows_per_s"}}, "ratios"}``."""
    spark = _session(partitions)
    try:
        cases = _cases(spark, rows, partitions)
        _check_same_ids(spark)
        results: dict[str, dict[str, float]] = {}
        for name, action in cases.items():
            action()  # warm-up: JIT, Python workers, Arrow
            times = []
            for _ in range(repeat):
                started = time.perf_counter()
                action()
                times.append(time.perf_counter() - started)
            seconds = statistics.median(times)
            results[name] = {"seconds": seconds, "rows_per_s": rows / seconds, "runs": times}
            print(f"{name:12s} {rows / seconds:>12,.0f} rows/s  (median of {repeat}: {seconds:.2f} s)", flush=True)
    finally:
        spark.stop()
    loop = _python_loop(loop_rows)
    started = time.perf_counter()
    loop()
    seconds = time.perf_counter() - started
    results["python_loop"] = {"seconds": seconds, "rows_per_s": loop_rows / seconds, "runs": [seconds],
                              "rows": loop_rows}
    print(f"{'python_loop':12s} {loop_rows / seconds:>12,.0f} rows/s  (one core, no Spark, {loop_rows:,} ids)")
    jvm = results["jvm"]["rows_per_s"]
    ratios = {f"jvm/{name}": jvm / r["rows_per_s"] for name, r in results.items() if name != "jvm"}
    for name, ratio in ratios.items():
        print(f"{name:24s} {ratio:6.1f}x")
    return {"rows": rows, "partitions": partitions, "repeat": repeat, "load_avg": os.getloadavg(),
            "cases": results, "ratios": ratios}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--json", help="also write the results to this JSON file")
    args = parser.parse_args(argv)
    result = run(args.rows, args.repeat, args.partitions)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
