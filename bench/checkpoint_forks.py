"""What a micro-batch's checkpoint writes cost on a local disk, per checkpoint file manager.

    .venv/bin/python -m bench.checkpoint_forks [--batches 30] [--rounds 2]

Starts a local[2] session under Java Flight Recorder and runs, alternating, queries with Spark's default
checkpoint file manager and with :func:`safebunny.spark.conf.local_checkpoint_conf`. Each query is a
``rate`` source (100 rows/s) into the ``noop`` sink, a batch every 100 ms, so the checkpoint writes are
most of a batch: the source does not matter to them (safebunny's is the same). Prints, per setting, the
processes the driver JVM started under that query's checkpoint folder (``jdk.ProcessStart`` events:
Hadoop's ``chmod`` and ``readlink`` without its native library) per batch, and the medians of Spark's
``walCommit`` (offset log) and ``commitOffsets`` (commit log) phases. Needs ``jcmd`` and ``jfr`` (a JDK).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from safebunny.spark.conf import CHECKPOINT_FILE_MANAGER_KEY, local_checkpoint_conf

__all__ = ["main"]

_COMMAND = re.compile(r'^\s*command = "(?P<cmd>[^"]*)"', re.M)


def _query(spark: Any, checkpoint: Path, batches: int) -> list[dict[str, Any]]:
    query = (spark.readStream.format("rate").option("rowsPerSecond", 100).load()
             .writeStream.format("noop").option("checkpointLocation", str(checkpoint))
             .trigger(processingTime="100 milliseconds").start())
    try:
        while query.lastProgress is None or query.lastProgress["batchId"] < batches - 1:
            if query.exception() is not None:
                raise RuntimeError(f"the query failed: {query.exception()}")
            time.sleep(0.2)
    finally:
        query.stop()
    return [p for p in query.recentProgress if p["batchId"] < batches]


def _process_starts(pid: int, workdir: Path) -> list[str]:
    dump = workdir / "dump.jfr"
    subprocess.run(["jcmd", str(pid), "JFR.dump", "name=ckpt", f"filename={dump}"], check=True, capture_output=True)
    out = subprocess.run(["jfr", "print", "--events", "jdk.ProcessStart", str(dump)], check=True,
                         capture_output=True, text=True).stdout
    return _COMMAND.findall(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.checkpoint_forks", description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=30, help="micro-batches per query")
    parser.add_argument("--rounds", type=int, default=2, help="queries per setting, alternating")
    args = parser.parse_args(argv)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    workdir = Path(tempfile.mkdtemp(prefix="safebunny-checkpoint-forks-"))
    spark = (SparkSession.builder.master("local[2]").appName("safebunny-checkpoint-forks")
             .config("spark.ui.enabled", "false")
             .config("spark.driver.extraJavaOptions", "-XX:StartFlightRecording=name=ckpt,settings=default")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    results: dict[str, list[tuple[Path, list[dict[str, Any]]]]] = {"spark-default": [], "local": []}
    try:
        pid = int(spark._jvm.java.lang.ProcessHandle.current().pid())
        for i in range(args.rounds):
            order = ["spark-default", "local"] if i % 2 == 0 else ["local", "spark-default"]
            for setting in order:
                if setting == "local":
                    for key, value in local_checkpoint_conf().items():
                        spark.conf.set(key, value)
                else:
                    spark.conf.unset(CHECKPOINT_FILE_MANAGER_KEY)
                checkpoint = workdir / f"ck-{setting}-{i}"
                results[setting].append((checkpoint, _query(spark, checkpoint, args.batches)))
        commands = _process_starts(pid, workdir)
    finally:
        spark.stop()
    for setting, runs in results.items():
        # the offset and commit logs' files, per batch; the rest (folders, metadata, the source's log) once a query
        logs = [sum(f"{checkpoint}/offsets/" in c or f"{checkpoint}/commits/" in c for c in commands)
                for checkpoint, _ in runs]
        once = [sum(f"{checkpoint}/" in c or c.endswith(str(checkpoint)) for c in commands) - n
                for (checkpoint, _), n in zip(runs, logs, strict=True)]
        progress = [p for _, ps in runs for p in ps]
        wal = statistics.median(p["durationMs"].get("walCommit", 0) for p in progress)
        com = statistics.median(p["durationMs"].get("commitOffsets", 0) for p in progress)
        per_batch = statistics.median(n / args.batches for n in logs)
        print(f"{setting:>13} checkpoints: {per_batch:.1f} process starts per batch for the offset and commit logs "
              f"(queries of {args.batches} batches: {logs}; once per query: {once}), walCommit p50 {wal:.0f} ms, "
              f"commitOffsets p50 {com:.0f} ms")
    shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
