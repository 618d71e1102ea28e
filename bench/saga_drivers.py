"""One sharded saga step run by one driver process and by two, and the takeover time after ``kill -9``.

    .venv/bin/python -m bench.saga_drivers [--messages 4000] [--shards 4] [--out DIR]

The step (``shards=4``, one Delta append per batch, batches of up to 500) drains a backlog of
``--messages`` orders published before the drivers start. Throughput is the messages over the time from
the first batch to the last effect row, per case: one driver, two drivers started together (the broker
makes the first consumer of each shard queue its active one, so the split between them is whatever their
start order gives; reported). Then takeover: two drivers, the backlog trickling in, the one holding the
most shards killed with SIGKILL; the time until the other runs a batch on one of those shards. Then
balance: one driver holding every shard, a second one started, orders trickling in; the seconds until
each holds its share by the leases. The ratio
is two drivers' throughput over one's (on a 2-core machine expect little gain: the drivers share the
cores, and the broker too).

A driver is this module run with ``--driver NAME`` (what the orchestrator starts). Writes
``saga_drivers.json`` to ``bench/results`` (or ``--out``).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["drain_case", "main", "publisher_session"]

RESULTS = Path(__file__).resolve().parent / "results"


def _saga(uri: str, name: str, workdir: str, shards: int, driver: str | None) -> Any:
    import safebunny

    saga = safebunny.Saga(name, uri=uri, root=os.path.join(workdir, "saga"), settings=safebunny.SagaSettings(
        batch_size=500, driver=driver))

    @saga.step("stock", consumes="OrderPlaced", from_node="orders", schema="orderId string", shards=shards)
    def reserve(orders: Any, ctx: Any) -> Any:
        return safebunny.Outcome(effects=[safebunny.append(orders.select("messageId", "orderId"),
                                                           os.path.join(workdir, "reservations"))])

    return saga


@contextlib.contextmanager
def _case(uri: str, kind: str, shards: int) -> Iterator[tuple[Any, str, str, dict[str, subprocess.Popen]]]:  # type: ignore[type-arg]
    """A saga of its own for one case, its root in a temporary folder: (saga, name, folder, the case's driver
    processes by name). Afterwards a driver still running is killed, the saga's queues deleted and the folder
    removed, whether the case ended or failed."""
    from safebunny.saga.define import topology

    workdir = tempfile.mkdtemp(prefix=f"sb-{kind}-")
    name = f"bench-{kind}-{uuid.uuid4().hex[:6]}"
    processes: dict[str, subprocess.Popen] = {}  # type: ignore[type-arg]
    saga = _saga(uri, name, workdir, shards, None)
    try:
        yield saga, name, workdir, processes
    finally:
        for process in processes.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        try:
            topology.delete(saga)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)


def _run_driver(uri: str, name: str, workdir: str, shards: int, driver: str) -> None:
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName(f"bench-driver-{driver}")
             .config("spark.ui.enabled", "false").config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.ui.showConsoleProgress", "false").config("spark.sql.shuffle.partitions", "2")
             .getOrCreate())
    running = _saga(uri, name, workdir, shards, driver).run(spark, trigger="500 milliseconds")
    print("RUNNING", flush=True)
    stop = Path(workdir) / f"stop-{driver}"
    while not stop.exists():
        time.sleep(0.2)
    running.stop()
    spark.stop()


def _start(uri: str, name: str, workdir: str, shards: int, driver: str) -> subprocess.Popen:  # type: ignore[type-arg]
    log = open(Path(workdir) / f"driver-{driver}.log", "w")  # noqa: SIM115 - the driver writes it until it ends
    return subprocess.Popen([sys.executable, "-m", "bench.saga_drivers", "--driver", driver, "--uri", uri,
                             "--name", name, "--workdir", workdir, "--shards", str(shards)],
                            cwd=str(Path(__file__).resolve().parents[1]), stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)


def _rows(workdir: str) -> int:
    from safebunny.delta.delta_rs import DeltaRsTarget

    table = DeltaRsTarget(os.path.join(workdir, "reservations")).read()
    return 0 if table is None else table.num_rows


def _publish(spark: Any, saga: Any, first: int, count: int) -> None:
    orders = spark.createDataFrame([(f"o{i}",) for i in range(first, first + count)], "orderId string")
    saga.start(orders, node="orders", type="OrderPlaced", business_key="orderId")


def _stop(workdir: str, processes: dict[str, subprocess.Popen]) -> None:  # type: ignore[type-arg]
    for driver in processes:
        (Path(workdir) / f"stop-{driver}").touch()
    for process in processes.values():
        try:
            process.wait(timeout=90)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)


def _tree_cpu(pid: int) -> float:
    """CPU seconds of a process and its live descendants (the driver's JVM, its reader and worker processes)."""
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root] + root.children(recursive=True)
    except psutil.NoSuchProcess:
        return 0.0
    total = 0.0
    for proc in procs:
        try:
            t = proc.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
        except psutil.NoSuchProcess:
            continue
    return total


def drain_case(spark: Any, uri: str, shards: int, messages: int, drivers: list[str]) -> dict[str, Any]:
    """Drain a backlog of ``messages`` through the step on ``shards`` shards run by ``drivers``: the rate from the
    first effect row to the last, the split of the shards, and the drivers' CPU (process trees) over that span."""
    with _case(uri, "drivers", shards) as (saga, name, workdir, processes):
        saga.declare()
        _publish(spark, saga, 0, messages)
        processes.update({d: _start(uri, name, workdir, shards, d) for d in drivers})
        deadline = time.monotonic() + 600
        first, cpu0 = None, 0.0
        while _rows(workdir) < messages and time.monotonic() < deadline:
            if first is None and _rows(workdir) > 0:
                first, cpu0 = time.monotonic(), sum(_tree_cpu(p.pid) for p in processes.values())
            time.sleep(0.1)
        done, cpu1 = time.monotonic(), sum(_tree_cpu(p.pid) for p in processes.values())
        held = [s.last_driver for s in saga.shards()]
        _stop(workdir, processes)
        rows = _rows(workdir)
        seconds = done - (first or done)
        return {"drivers": len(drivers), "shards": shards, "messages": messages, "rows": rows,
                "seconds": round(seconds, 2), "msg_per_s": round(messages / seconds, 1) if seconds > 0 else None,
                "driver_cpu_s": round(cpu1 - cpu0, 2),
                "driver_cpu_us_per_msg": round((cpu1 - cpu0) * 1e6 / messages, 1),
                "shards_by_driver": {d: held.count(d) for d in drivers}}


def _takeover_case(spark: Any, uri: str, shards: int) -> dict[str, Any]:
    from safebunny.saga.define import topology

    with _case(uri, "takeover", shards) as (saga, name, workdir, processes):
        saga.declare()
        processes["a"] = _start(uri, name, workdir, shards, "a")
        deadline = time.monotonic() + 300
        while min((d[1] if d else 0) for d in topology.depths(saga, [s.queue for s in saga.shards()]).values()) < 1:
            if time.monotonic() > deadline:
                raise TimeoutError("driver a did not attach to every shard")
            time.sleep(1)
        processes["b"] = _start(uri, name, workdir, shards, "b")
        while "RUNNING" not in (Path(workdir) / "driver-b.log").read_text(errors="replace"):
            time.sleep(1)
        time.sleep(5)  # b's consumers attach at their first trigger, as standbys
        sent = 0
        while sent < 200:  # a trickle, so a holds every shard busy when it dies
            _publish(spark, saga, sent, 50)
            sent += 50
            time.sleep(0.5)
        os.killpg(processes["a"].pid, signal.SIGKILL)
        killed = time.time()
        processes["a"].wait()
        _publish(spark, saga, sent, 200)
        sent += 200
        takeover = None
        while time.monotonic() < deadline:
            times = [dt.datetime.fromisoformat(s.last_batch).timestamp() for s in saga.shards()
                     if s.last_driver == "b" and s.last_batch]
            later = [t for t in times if t >= killed - 1]
            if later:
                takeover = min(later) - killed
                break
            time.sleep(0.2)
        while _rows(workdir) < sent and time.monotonic() < deadline:
            time.sleep(0.2)
        finished = time.time() - killed
        _stop(workdir, {"b": processes["b"]})
        return {"takeover_s": None if takeover is None else round(max(0.0, takeover), 2),
                "all_done_after_kill_s": round(finished, 2), "rows": _rows(workdir), "sent": sent}


def _balance_case(spark: Any, uri: str, shards: int) -> dict[str, Any]:
    """a holds every shard; b starts; orders trickle in: the seconds from b running until each driver holds its
    share by the leases (``saga.shards()``'s holder), and the split then."""
    with _case(uri, "balance", shards) as (saga, name, workdir, processes):
        def holders() -> list[str | None]:
            return [s.holder for s in saga.shards()]

        saga.declare()
        processes["a"] = _start(uri, name, workdir, shards, "a")
        deadline = time.monotonic() + 300
        sent = 0
        while holders() != ["a"] * shards:
            if time.monotonic() > deadline:
                raise TimeoutError(f"driver a never held every shard: {holders()}")
            _publish(spark, saga, sent, 20)
            sent += 20
            time.sleep(1)
        processes["b"] = _start(uri, name, workdir, shards, "b")
        while "RUNNING" not in (Path(workdir) / "driver-b.log").read_text(errors="replace"):
            time.sleep(0.5)
        running = time.monotonic()
        share = {"a": shards // 2 + shards % 2, "b": shards // 2}
        balanced = None
        while time.monotonic() < deadline:
            now = holders()
            if sorted(now.count(d) for d in "ab") == sorted(share.values()) and None not in now:
                balanced = time.monotonic() - running
                break
            _publish(spark, saga, sent, 20)
            sent += 20
            time.sleep(1)
        split = holders()
        while _rows(workdir) < sent and time.monotonic() < deadline:
            time.sleep(0.2)
        _stop(workdir, processes)
        return {"balanced_after_b_running_s": None if balanced is None else round(balanced, 1),
                "holders": split, "sent": sent, "rows": _rows(workdir)}


def publisher_session() -> Any:
    """The orchestrator's small Spark session: it publishes the orders (``saga.start``)."""
    from pyspark.sql import SparkSession

    return (SparkSession.builder.master("local[1]").appName("bench-drivers-publisher")
            .config("spark.ui.enabled", "false").config("spark.driver.bindAddress", "127.0.0.1").getOrCreate())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=4000)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--out", default=str(RESULTS))
    parser.add_argument("--uri", default=os.environ.get("SAFEBUNNY_URI", "amqp://guest:guest@127.0.0.1:5672/%2F"))
    parser.add_argument("--driver")
    parser.add_argument("--name")
    parser.add_argument("--workdir")
    args = parser.parse_args(argv)
    if args.driver:
        _run_driver(args.uri, args.name, args.workdir, args.shards, args.driver)
        return 0
    from bench.session import bench_session

    with bench_session() as session:  # SIGTERM runs the cases' cleanup (their drivers killed) and stops Spark
        spark = session.keep_spark(publisher_session())
        one = drain_case(spark, args.uri, args.shards, args.messages, ["a"])
        two = drain_case(spark, args.uri, args.shards, args.messages, ["a", "b"])
        takeover = _takeover_case(spark, args.uri, args.shards)
        balance = _balance_case(spark, args.uri, args.shards)
    result = {"case": "sharded step · one driver vs two · takeover · balance", "shards": args.shards,
              "ratio": round(two["msg_per_s"] / one["msg_per_s"], 2) if one["msg_per_s"] and two["msg_per_s"] else None,
              "one_driver": one, "two_drivers": two, "takeover": takeover, "balance": balance,
              "load_average_at_end": os.getloadavg()}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "saga_drivers.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
