"""End-to-end latency of a 3-step saga against 3 chained plain Spark hops, in one run.

    .venv/bin/python -m bench.saga_latency [--rate 20] [--seconds 45] [--trigger "1 second"] [--rounds 3] [--out DIR]
    .venv-delta/bin/python -m bench.saga_latency --by-name [--delta-jars ~/.cache/safebunny/delta-jars/4.4.0] ...

Plain: three queries, each the safebunny source -> the safebunny sink (no inbox, no effects), chained
through four quorum queues, with the processing-time trigger as a user writes them. Plain paced: the same
queries run the way ``saga.run`` runs its steps (a zero trigger; the first query paced by its source at the
trigger's interval, the others taking each upstream output as it arrives: ``safebunny.queues.pacing``), the
baseline that isolates a step's own cost from how the hops are triggered. Saga: ``safebunny.Saga`` with
three steps, each one Delta append and one emit, its last emit bound to a measuring queue. All get the same
offered load (``rate`` messages per second for ``seconds``, each body carrying its publish time), the same
trigger and the same Spark session, in ``--rounds`` rounds whose order alternates; the case's ratios are the
rounds' medians. A message's latency is its arrival in the last queue minus its publish time; the first
``--warmup`` seconds of each case are left out. The saga's per-hop breakdown is the median of its steps'
``BatchReport.phases`` and Spark's own ``durationMs`` phases per query.

Writes ``saga_latency.json`` and ``saga_latency.png`` (latency over time) to ``bench/results`` (or
``--out``): the case ``saga vs plain hops · e2e latency``, whose ``ratio`` is saga p50 / plain p50 and
``paced_ratio`` saga p50 / paced plain p50. The saga's ``after_hop_p50_ms`` is the median latency after each
step (copies of each step's output in a measuring queue).

``--by-name``: the saga's effect tables are tables by name on Delta Spark (the Databricks path; the ``.venv-delta``
interpreter, ``make install-delta``); it writes ``saga_latency_by_name.json`` and ``.png``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
import pika

__all__ = ["main", "measure"]

RESULTS = Path(__file__).resolve().parent / "results"
HOPS = 3
#: issue 39, item 1
GOAL = "saga p50 <= 1.0x plain (ratio) and <= 1.15x paced plain (paced_ratio); p99 <= 1.2x paced (paced_p99_ratio)"


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1)


class _Probe:
    """Publishes at a steady rate and collects arrivals in ``final`` (latency in ms, keyed by send time)."""

    def __init__(self, uri: str, final: str) -> None:
        self.uri, self.final = uri, final
        self.arrivals: list[tuple[float, float]] = []  # (sent, latency ms)
        self._stop = threading.Event()
        self._consumer = threading.Thread(target=self._consume, daemon=True)
        self._consumer.start()

    def _consume(self) -> None:
        conn = pika.BlockingConnection(pika.URLParameters(self.uri))
        ch = conn.channel()
        ch.basic_qos(prefetch_count=500)
        for method, _props, body in ch.consume(self.final, inactivity_timeout=0.2):
            if self._stop.is_set():
                break
            if method is None:
                continue
            now = time.time()
            sent = float(orjson.loads(body)["t0"])
            self.arrivals.append((sent, (now - sent) * 1000.0))
            ch.basic_ack(method.delivery_tag)
        ch.cancel()
        conn.close()

    def publish(self, exchange: str, routing_key: str, rate: float, seconds: float) -> int:
        conn = pika.BlockingConnection(pika.URLParameters(self.uri))
        ch = conn.channel()
        ch.confirm_delivery()
        n, start = 0, time.time()
        while time.time() - start < seconds:
            due = start + n / rate
            time.sleep(max(0.0, due - time.time()))
            mid = uuid.uuid4().hex
            body = orjson.dumps({"orderId": n, "t0": time.time()})
            ch.basic_publish(exchange, routing_key, body, pika.BasicProperties(
                message_id=mid, correlation_id=f"o{mid}", content_type="application/json", delivery_mode=2,
                type="T0"))
            n += 1
        conn.close()
        return n

    def wait(self, n: int, timeout: float) -> None:
        deadline = time.time() + timeout
        while len(self.arrivals) < n and time.time() < deadline:
            time.sleep(0.2)
        self._stop.set()
        self._consumer.join(5)


def _declare(uri: str, names: list[str]) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(uri))
    ch = conn.channel()
    for name in names:
        ch.queue_declare(name, durable=True, arguments={"x-queue-type": "quorum"})
    conn.close()


def _delete(uri: str, names: list[str]) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(uri))
    ch = conn.channel()
    for name in names:
        ch.queue_delete(name)
    conn.close()


def _spark_phases(queries: list[Any]) -> dict[str, float]:
    """Median ``durationMs`` per phase over the non-empty batches of ``queries``."""
    phases: dict[str, list[float]] = {}
    for q in queries:
        for p in q.recentProgress:
            if p.numInputRows:
                for k, v in (p.durationMs or {}).items():
                    phases.setdefault(k, []).append(float(v))
    return {k: round(statistics.median(v), 1) for k, v in sorted(phases.items())}


def _plain(spark: Any, uri: str, rate: float, seconds: float, trigger: str, work: Path,
           paced: bool = False) -> dict[str, Any]:
    """Three chained plain queries with ``trigger`` as a user writes them, or (``paced``) run the way a saga runs
    its steps: a zero trigger, the first query paced by its source at the trigger's interval, the others taking
    each upstream output as it arrives (safebunny.queues.pacing)."""
    from safebunny.options import duration_ms

    tag = uuid.uuid4().hex[:6]
    queues = [f"sb-lat-plain-{tag}-{i}" for i in range(HOPS + 1)]
    _declare(uri, queues)
    queries = []
    try:
        for i in range(HOPS):
            reader = (spark.readStream.format("safebunny").option("uri", uri).option("queue", queues[i])
                      .option("queueType", "quorum").option("journalLocation", str(work / f"pj-{tag}-{i}")))
            if paced and i == 0:
                reader = reader.option("minBatchIntervalMs", str(int(duration_ms(trigger) or 1000)))
            queries.append(reader.load().select("value", "messageId", "correlationId").writeStream.format("safebunny")
                           .option("uri", uri).option("routingKey", queues[i + 1])
                           .option("checkpointLocation", str(work / f"pck-{tag}-{i}"))
                           .trigger(processingTime="0 seconds" if paced else trigger).start())
        probe = _Probe(uri, queues[-1])
        time.sleep(5)  # the queries' first (empty) batches
        n = probe.publish("", queues[0], rate, seconds)
        probe.wait(n, 120)
        failed = [f"{q.id}: {str(q.exception()).splitlines()[0]}" for q in queries if q.exception() is not None]
        if failed:
            raise RuntimeError(f"a plain hop's query failed, so the comparison means nothing: {failed}")
        return {"arrivals": probe.arrivals, "sent": n, "spark": _spark_phases(queries)}
    finally:
        for q in queries:
            q.stop()
        _delete(uri, queues)


def _saga(spark: Any, uri: str, rate: float, seconds: float, trigger: str, work: Path,
          by_name: bool = False) -> dict[str, Any]:
    import safebunny

    name = f"sblat{uuid.uuid4().hex[:6]}"
    saga = safebunny.Saga(name, uri=uri, root=str(work / name))
    schema = "orderId long, t0 double"
    if by_name:
        spark.sql("CREATE DATABASE IF NOT EXISTS sb_latency")
    for index in range(HOPS):
        node, consumes, source = f"s{index + 1}", f"T{index}", "src" if index == 0 else f"s{index}"
        table = f"sb_latency.{name}_{node}" if by_name else str(work / name / f"effects-{node}")

        def handle(df: Any, ctx: Any, table: str = table, out: str = f"T{index + 1}") -> Any:
            rows = df.select("messageId", "orderId", "t0")
            return safebunny.Outcome(effects=[safebunny.append(rows, table)], emits=[safebunny.emit(rows, type=out)])

        saga.step(node, consumes=consumes, from_node=source, schema=schema, produces=[f"T{index + 1}"])(handle)
    saga.declare()
    # one measuring queue per hop: the last is the case's; the others give the cumulative latency after each step
    hops = [f"{name}-hop{k}" for k in range(1, HOPS + 1)]
    conn = pika.BlockingConnection(pika.URLParameters(uri))
    ch = conn.channel()
    for k, queue in enumerate(hops, start=1):
        ch.queue_declare(queue, durable=True, arguments={"x-queue-type": "quorum"})
        ch.queue_bind(queue, name, routing_key=f"s{k}.T{k}")
    conn.close()
    running = saga.run(spark, trigger=trigger)
    try:
        probes = [_Probe(uri, queue) for queue in hops]
        probe = probes[-1]
        time.sleep(5)
        n = probe.publish(name, "src.T0", rate, seconds)
        for p in probes:
            p.wait(n, 120)
        steps = [saga.runtime(s) for s in saga.steps]
        phases: dict[str, list[float]] = {}
        for step in steps:
            for report in step.reports:
                if report.received:
                    for k, v in report.phases.items():
                        phases.setdefault(k, []).append(v * 1000.0)
        queries = [q for q in spark.streams.active if q.name and q.name.startswith(name)]
        return {"arrivals": probe.arrivals, "sent": n,
                "after_hop_p50_ms": [_pct([lat for _, lat in p.arrivals], 0.5) for p in probes],
                "step": {k: round(statistics.median(v), 1) for k, v in phases.items()},
                "spark": _spark_phases(queries)}
    finally:
        running.stop()
        _delete(uri, hops)
        from safebunny.saga.define import topology

        topology.delete(saga)  # the saga's exchange, step, retry and poison queues


def _summary(run: dict[str, Any], warmup: float) -> dict[str, Any]:
    first = min((s for s, _ in run["arrivals"]), default=0.0)
    kept = [lat for sent, lat in run["arrivals"] if sent - first >= warmup]
    return {"sent": run["sent"], "arrived": len(run["arrivals"]), "measured": len(kept),
            "p50_ms": _pct(kept, 0.5), "p90_ms": _pct(kept, 0.9), "p99_ms": _pct(kept, 0.99)}


def _round(spark: Any, uri: str, rate: float, seconds: float, trigger: str, warmup: float, work: Path,
           saga_first: bool, by_name: bool = False) -> dict[str, Any]:
    """One plain chain and one saga, in the given order; their summaries and p50/p99 ratios."""
    runs: dict[str, dict[str, Any]] = {}
    for case in ("saga", "plain", "plain_paced") if saga_first else ("plain", "plain_paced", "saga"):
        if case == "saga":
            runs[case] = _saga(spark, uri, rate, seconds, trigger, work, by_name)
        else:
            runs[case] = _plain(spark, uri, rate, seconds, trigger, work, paced=case == "plain_paced")
    p, s = _summary(runs["plain"], warmup), _summary(runs["saga"], warmup)
    paced = _summary(runs["plain_paced"], warmup)
    ratio = round(s["p50_ms"] / p["p50_ms"], 2) if p["p50_ms"] and s["p50_ms"] else None
    p99 = round(s["p99_ms"] / p["p99_ms"], 2) if p["p99_ms"] and s["p99_ms"] else None
    paced_ratio = round(s["p50_ms"] / paced["p50_ms"], 2) if paced["p50_ms"] and s["p50_ms"] else None
    paced_p99 = round(s["p99_ms"] / paced["p99_ms"], 2) if paced["p99_ms"] and s["p99_ms"] else None
    return {"ratio": ratio, "p99_ratio": p99, "paced_ratio": paced_ratio, "paced_p99_ratio": paced_p99,
            "plain": {**p, "spark_phases_ms": runs["plain"]["spark"]},
            "plain_paced": {**paced, "spark_phases_ms": runs["plain_paced"]["spark"]},
            "saga": {**s, "after_hop_p50_ms": runs["saga"]["after_hop_p50_ms"],
                     "step_phases_ms": runs["saga"]["step"], "spark_phases_ms": runs["saga"]["spark"]},
            "series": {"plain": runs["plain"]["arrivals"], "plain_paced": runs["plain_paced"]["arrivals"],
                       "saga": runs["saga"]["arrivals"]}}


def measure(spark: Any, uri: str, rate: float, seconds: float, trigger: str, warmup: float, work: Path,
            rounds: int = 1, by_name: bool = False) -> dict[str, Any]:
    """``rounds`` rounds of plain and saga, the order alternating; the case's ratios are the medians of the
    rounds' ratios (a hop's latency moves in steps of a trigger interval, so one round can be unlucky)."""
    done = [_round(spark, uri, rate, seconds, trigger, warmup, work, saga_first=index % 2 == 1, by_name=by_name)
            for index in range(rounds)]

    def median(key: str) -> float | None:
        values = [r[key] for r in done if r[key] is not None]
        return round(statistics.median(values), 2) if values else None

    last = done[-1]
    return {"case": "saga vs plain hops · e2e latency", "ratio": median("ratio"), "p99_ratio": median("p99_ratio"),
            "paced_ratio": median("paced_ratio"), "paced_p99_ratio": median("paced_p99_ratio"),
            "goal": GOAL, "rate": rate, "seconds": seconds, "trigger": trigger,
            "hops": HOPS, "rounds": [{k: v for k, v in r.items() if k != "series"} for r in done],
            "plain": last["plain"], "plain_paced": last["plain_paced"], "saga": last["saga"],
            "series": last["series"]}


def _plot(result: dict[str, Any], path: Path) -> None:
    from safebunny.optional import require

    require("matplotlib", "plot the latency")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(9, 4))
    for label, points in result["series"].items():
        if points:
            t0 = points[0][0]
            ax.plot([s - t0 for s, _ in points], [lat / 1000.0 for _, lat in points], ".", ms=3, label=label)
    ax.set_xlabel("seconds since the first message")
    ax.set_ylabel("end-to-end latency (s)")
    ax.set_title(f"3 hops at {result['rate']:g} msg/s, trigger {result['trigger']}: saga / plain p50 = "
                 f"{result['ratio']}, saga / paced plain {result.get('paced_ratio')}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.saga_latency", description=__doc__.splitlines()[0])
    parser.add_argument("--uri", default=os.environ.get("SAFEBUNNY_BENCH_AMQP_URI",
                                                        "amqp://guest:guest@127.0.0.1:5672/%2F"))
    parser.add_argument("--rate", type=float, default=20.0)
    parser.add_argument("--seconds", type=float, default=45.0)
    parser.add_argument("--warmup", type=float, default=10.0)
    parser.add_argument("--trigger", default="1 second")
    parser.add_argument("--rounds", type=int, default=1, help="rounds of plain and saga (order alternating)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--by-name", action="store_true", help="the saga's effect tables by name on Delta Spark")
    parser.add_argument("--delta-jars", default=os.path.expanduser("~/.cache/safebunny/delta-jars/4.4.0"),
                        help="Delta Spark's jars (make delta-jars), with --by-name")
    args = parser.parse_args(argv)
    stem = "saga_latency_by_name" if args.by_name else "saga_latency"
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    from bench.session import bench_session

    with bench_session("safebunny-saga-latency-") as session:
        work = session.workdir
        spark = session.start_spark(args.delta_jars if args.by_name else None)
        result = measure(spark, args.uri, args.rate, args.seconds, args.trigger, args.warmup, work, args.rounds,
                         args.by_name)
    result["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    args.out.mkdir(parents=True, exist_ok=True)
    print(json.dumps({k: v for k, v in result.items() if k != "series"}, indent=2))
    if importlib.util.find_spec("matplotlib") is not None:  # the plots extra; .venv-delta has none
        _plot(result, args.out / f"{stem}.png")
    series = result.pop("series")
    (args.out / f"{stem}.json").write_text(json.dumps({**result, "series_points": {
        k: len(v) for k, v in series.items()}}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
