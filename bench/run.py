"""``python -m bench.run --quick|--full``: the raw-client ceilings and the connector, side by side.

One run against one broker (``SAFEBUNNY_BENCH_AMQP_URI``, default the local
``amqp://guest:guest@127.0.0.1:5672/%2F``) measures, per queue type, the raw ceilings
(pika publish with a confirm window, pika consume with ``multiple`` acks, a pika stage loop,
rstream consume for streams) and the connector (sink, stage, source), then the
``maxMessagesPerTrigger`` sweep and the end-to-end latency through a running stage. Rates are
medians over the runs; the ratio column divides each connector case by its raw ceiling from
the same run. Results go to ``bench/results/<mode>.{json,md,png}``. A connector case that
cannot run says why; it never gets a number.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import connector as conn
from bench import raw, raw_multi
from bench.broker import StreamBroker, broker_version
from bench.machine import describe_machine
from bench.memory import MemorySampler
from bench.plot import plot_throughput
from bench.report import (
    CaseResult,
    evaluate_targets,
    format_markdown,
    format_text,
    mark_unmeasured,
    results_to_json,
)
from bench.session import BenchSession, bench_session

__all__ = ["MODES", "Mode", "main"]

RESULTS = Path(__file__).resolve().parent / "results"
DEFAULT_URI = "amqp://guest:guest@127.0.0.1:5672/%2F"


@dataclass(frozen=True)
class Mode:
    """How much to measure."""

    name: str
    n_amqp: int  # messages per classic/quorum case and per AMQP-side stream case
    n_stream: int  # messages in the stream the stream-protocol cases read
    sweep_depth: dict[int, int]  # maxMessagesPerTrigger → queue depth for the sweep (deeper than the batch)
    default_depth: int  # queue depth for the source at default options (backlog drain)
    runs: int  # repetitions; rates are medians
    latency_n: int  # messages through the latency probe
    latency_rate: float  # msg/s offered to the latency probe
    timeout_s: float  # per case


MODES = {
    "quick": Mode("quick", n_amqp=60_000, n_stream=300_000, sweep_depth={1_000: 11_000, 10_000: 20_000, 50_000: 60_000},
                  default_depth=200_000, runs=1, latency_n=2_000, latency_rate=500.0, timeout_s=180.0),
    "full": Mode("full", n_amqp=70_000, n_stream=300_000, sweep_depth={1_000: 30_000, 10_000: 70_000, 50_000: 150_000},
                 default_depth=200_000, runs=3, latency_n=10_000, latency_rate=1_000.0, timeout_s=900.0),
}
SOURCE_MMPT = 10_000  # classic/quorum source and stage batches
STREAM_MMPT = 50_000  # stream source batches
SWEEP = (1_000, 10_000, 50_000)
STREAM_ARGS = {"x-stream-offset": "first"}


def _k(n: int) -> str:
    return f"{n // 1000}k" if n % 1000 == 0 else str(n)


class Bench:
    """Holds the run's state: queues, Spark, the memory sampler, and the results by case name."""

    def __init__(self, uri: str, mode: Mode, session: BenchSession) -> None:
        self.uri, self.mode = uri, mode
        self.book = session.book(uri)
        self.streams: StreamBroker = StreamBroker(uri, 5552, "")  # where the stream cases run (set in main)
        self.stream_book = self.book
        self.results: dict[str, CaseResult] = {}
        self.lines: list[tuple[str, str, list[tuple[float, int]]]] = []
        self.notes: list[str] = []
        self.spark: Any = None
        self.missing: dict[str, str] = {}
        self.sampler = MemorySampler(interval=0.25)
        self.workdir = session.workdir
        self.errors = Path(tempfile.gettempdir()) / f"safebunny-bench-{self.book.prefix}-errors.log"

    # -- recording -------------------------------------------------------------------------
    def case(self, name: str, group: str, kind: str, queue_type: str, ceiling: str | None = None,
             **params: Any) -> CaseResult:
        if name not in self.results:
            self.results[name] = CaseResult(name, group, kind, queue_type, ceiling=ceiling, params=params)
        return self.results[name]

    def measure(self, result: CaseResult, fn: Callable[[], Any], role: str | None = None) -> bool:
        """Run one measurement into ``result``; a failure is recorded with its reason, never as a number."""
        if role is not None and role in self.missing:
            result.status, result.reason = "not available", self.missing[role]
            return False
        if result.status != "ok":
            return False
        t0 = time.time()
        try:
            run = fn()
        except Exception as exc:  # noqa: BLE001 - any failure becomes the case's reason
            result.status = "failed"
            result.reason = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"
            with self.errors.open("a") as log:
                log.write(f"== {result.name}\n{traceback.format_exc()}\n")
            return False
        t1 = time.time()
        result.messages = run.count
        if result.kind != "latency":  # a latency probe runs at an offered rate; its own rate means nothing
            result.rates.append(run.rate)
        result.batch_ms += list(getattr(run, "batch_ms", []) or [])
        result.e2e_ms += list(run.latencies_ms or [])
        result.params.update(getattr(run, "extra", {}) or {})
        if result.group == "connector":
            for role_name, mb in self.sampler.peaks(t0, t1).items():
                result.memory_mb[role_name] = max(result.memory_mb.get(role_name, 0.0), mb)
        cpu = self._cpu(run.start, run.end) if result.kind != "latency" else {}
        if cpu:
            for role_name, secs in cpu.items():
                result.cpu_s[role_name] = round(result.cpu_s.get(role_name, 0.0) + secs, 2)
            result.cpu_messages += run.count
        if run.series and result.kind != "latency":
            self.lines.append((result.name, result.group, run.series))
        return True

    def _cpu(self, start: float, end: float) -> dict[str, float]:
        """CPU seconds per role over [start, end], once the sampler has a sample after ``end``."""
        deadline = time.monotonic() + 2.0
        while (not self.sampler.cpu_samples or self.sampler.cpu_samples[-1][0] < end) and \
                time.monotonic() < deadline:
            time.sleep(0.05)  # waiting for the sampler's next tick, bounded
        return self.sampler.cpu_between(start, end)

    # -- helpers ---------------------------------------------------------------------------
    def refill(self, queue: str, kind: str, n: int) -> None:
        """Make ``queue`` hold exactly ``n`` fresh messages after a failed connector step (not measured)."""
        if kind != "stream":
            self.book._channel().queue_purge(queue)  # noqa: SLF001
        raw.publish_window(self.streams.uri if kind == "stream" else self.uri, queue, n, timeout_s=self.mode.timeout_s)

    def depth_ok(self, queue: str, kind: str, n: int) -> bool:
        return kind == "stream" or self.book.depth(queue) == n

    # -- the chains --------------------------------------------------------------------------
    def amqp_chain(self, kind: str) -> list[tuple[str, Callable[[], None]]]:
        """classic/quorum: raw publish → raw stage → raw consume; sink → stage → source."""
        m, n = self.mode, self.mode.n_amqp
        pub = self.case(f"raw: pika publish, confirm window 1000 · {kind}", "raw", "publish", kind)
        stage = self.case(f"raw: pika stage loop · {kind}", "raw", "stage", kind)
        cons = self.case(f"raw: pika consume, multiple acks · {kind}", "raw", "consume", kind)
        sink = self.case(f"sink · {kind}", "connector", "sink", kind, pub.name)
        cstage = self.case(f"stage · {kind}", "connector", "stage", kind, stage.name,
                           maxMessagesPerTrigger=SOURCE_MMPT)
        source = self.case(f"source · {kind} · {_k(SOURCE_MMPT)}/batch", "connector", "source", kind, cons.name,
                           maxMessagesPerTrigger=SOURCE_MMPT)
        q: dict[str, str] = {}

        def raw_steps() -> None:
            q["a"], q["b"] = self.book.declare(f"{kind}-a", kind), self.book.declare(f"{kind}-b", kind)
            self.measure(pub, lambda: raw.publish_window(self.uri, q["a"], n, timeout_s=m.timeout_s))
            if not self.depth_ok(q["a"], kind, n):
                self.refill(q["a"], kind, n)
            self.measure(stage, lambda: raw.stage_loop(self.uri, q["a"], q["b"], n, timeout_s=m.timeout_s))
            if not self.depth_ok(q["b"], kind, n):
                self.refill(q["b"], kind, n)
            self.measure(cons, lambda: raw.consume_multiple(self.uri, q["b"], n, timeout_s=m.timeout_s))
            self.book.delete(q["a"])
            self.book.delete(q["b"])

        def connector_steps() -> None:
            c, d = self.book.declare(f"{kind}-c", kind), self.book.declare(f"{kind}-d", kind)
            self.measure(sink, lambda: conn.run_sink(self.spark, self.uri, c, kind, n, m.timeout_s), "sink")
            if not self.depth_ok(c, kind, n):
                self.refill(c, kind, n)
            self.measure(cstage, lambda: conn.run_stage(self.spark, self.uri, c, d, kind, n, SOURCE_MMPT,
                                                        self.workdir, timeout_s=m.timeout_s), "stage")
            if not self.depth_ok(d, kind, n):
                self.refill(d, kind, n)
            self.measure(source, lambda: conn.run_source(self.spark, self.uri, d, kind, n, SOURCE_MMPT,
                                                         self.workdir, timeout_s=m.timeout_s), "source")
            self.book.delete(c)
            self.book.delete(d)

        return [(f"raw {kind}", raw_steps), (f"connector {kind}", connector_steps)]

    def stream_chain(self) -> list[tuple[str, Callable[[], None]]]:
        """Streams: the stream-protocol reads on a stream filled by rstream, the AMQP side on pika-filled ones."""
        m, n, ns = self.mode, self.mode.n_amqp, self.mode.n_stream
        su = self.streams.uri  # the machine's broker, or a throwaway one when it has no stream plugin
        k = "stream"
        rpub = self.case("raw: rstream publish, send_batch 1000 · stream", "raw", "publish", k)
        rcons = self.case("raw: rstream consume · stream", "raw", "consume", k)
        pcons = self.case("raw: pika consume over AMQP, multiple acks · stream", "raw", "consume", k)
        pub = self.case("raw: pika publish, confirm window 1000 · stream", "raw", "publish", k)
        stage = self.case("raw: pika stage loop · stream", "raw", "stage", k)
        rcons_amqp = self.case("raw: rstream consume of a pika-published stream · stream", "raw", "consume", k)
        src1 = self.case(f"source · stream · 1 partition · {_k(STREAM_MMPT)}/batch", "connector", "source", k,
                         rcons.name, maxMessagesPerTrigger=STREAM_MMPT, partitions=1)
        src2 = self.case(f"source · stream · 2 partitions · {_k(STREAM_MMPT)}/batch", "connector", "source", k,
                         rcons.name, maxMessagesPerTrigger=STREAM_MMPT, partitions=2)
        sink = self.case("sink · stream", "connector", "sink", k, pub.name)
        cstage = self.case("stage · stream", "connector", "stage", k, stage.name, maxMessagesPerTrigger=SOURCE_MMPT)
        q: dict[str, str] = {}

        def stream_protocol() -> None:
            q["s1"] = self.stream_book.declare("stream-s1", k)
            self.measure(rpub, lambda: raw.rstream_publish(su, q["s1"], ns, timeout_s=m.timeout_s))
            self.measure(rcons, lambda: raw.rstream_consume(su, q["s1"], ns, timeout_s=m.timeout_s))

        def stream_sources() -> None:
            for res, parts in ((src1, 1), (src2, 2)):
                self.measure(res, lambda p=parts: conn.run_source(self.spark, su, q["s1"], k, ns, STREAM_MMPT,
                                                                  self.workdir, partitions=p,
                                                                  timeout_s=m.timeout_s), "stream source")
            self.stream_book.delete(q["s1"])

        def amqp_side() -> None:
            s2, s3 = self.stream_book.declare("stream-s2", k), self.stream_book.declare("stream-s3", k)
            self.measure(pub, lambda: raw.publish_window(su, s2, n, timeout_s=m.timeout_s))
            self.measure(stage, lambda: raw.stage_loop(su, s2, s3, n, arguments=STREAM_ARGS,
                                                       timeout_s=m.timeout_s))
            self.measure(rcons_amqp, lambda: raw.rstream_consume(su, s2, n, timeout_s=m.timeout_s))
            # the whole of s3, so that no delivery is left over: a stream queue closes the connection on the
            # reject that pika's basic_cancel sends for prefetched, undelivered messages
            self.measure(pcons, lambda: raw.consume_multiple(su, s3, n, arguments=STREAM_ARGS,
                                                             timeout_s=m.timeout_s))
            self.stream_book.delete(s2)
            self.stream_book.delete(s3)

        def connector_side() -> None:
            s4, s5 = self.stream_book.declare("stream-s4", k), self.stream_book.declare("stream-s5", k)
            if not self.measure(sink, lambda: conn.run_sink(self.spark, su, s4, k, n, m.timeout_s), "sink"):
                self.stream_book.delete(s4)
                s4 = self.stream_book.declare("stream-s4", k)
                self.refill(s4, k, n)
            self.measure(cstage, lambda: conn.run_stage(self.spark, su, s4, s5, k, n, SOURCE_MMPT,
                                                        self.workdir, timeout_s=m.timeout_s), "stream stage")
            self.stream_book.delete(s4)
            self.stream_book.delete(s5)

        return [("rstream", stream_protocol), ("connector stream sources", stream_sources),
                ("raw stream (AMQP)", amqp_side), ("connector stream sink/stage", connector_side)]

    def sweep(self) -> list[tuple[str, Callable[[], None]]]:
        """The source on a quorum queue deeper than every batch, at each maxMessagesPerTrigger."""
        steps = []
        ceiling = "raw: pika consume, multiple acks · quorum"
        for mmpt in SWEEP:
            depth = self.mode.sweep_depth[mmpt]
            res = self.case(f"source · quorum · {_k(mmpt)}/batch (sweep, depth {_k(depth)})", "connector", "source",
                            "quorum", ceiling, maxMessagesPerTrigger=mmpt, sweep=True, depth=depth)

            def step(res: CaseResult = res, mmpt: int = mmpt, depth: int = depth) -> None:
                if "source" in self.missing:
                    self.measure(res, lambda: None, "source")
                    return
                q = self.book.declare("sweep", "quorum")
                raw.publish_window(self.uri, q, depth, timeout_s=self.mode.timeout_s)
                self.measure(res, lambda: conn.run_source(self.spark, self.uri, q, "quorum", depth, mmpt,
                                                          self.workdir, timeout_s=self.mode.timeout_s), "source")
                self.book.delete(q)

            steps.append((f"sweep {_k(mmpt)}", step))
        depth = self.mode.default_depth
        dres = self.case(f"source · quorum · default options (backlog drain, depth {_k(depth)})", "connector",
                         "source", "quorum", ceiling, defaultOptions=True, depth=depth)

        def default_step() -> None:
            if "source" in self.missing:
                self.measure(dres, lambda: None, "source")
                return
            q = self.book.declare("drain", "quorum")
            raw.publish_window(self.uri, q, depth, timeout_s=self.mode.timeout_s)
            self.measure(dres, lambda: conn.run_source(self.spark, self.uri, q, "quorum", depth, None,
                                                       self.workdir, timeout_s=self.mode.timeout_s), "source")
            self.book.delete(q)

        steps.append(("sweep default options", default_step))
        return steps + self.broker_ceiling()

    def broker_ceiling(self) -> list[tuple[str, Callable[[], None]]]:
        """Raw pika consumers in processes of their own on one quorum queue as deep as the default-options
        drain: the best of 1, 2 and 4 is the broker's ceiling the source's best is judged against."""
        steps = []
        for k in raw_multi.CONSUMERS:
            res = self.case(f"raw: pika consume, {k} process(es) · quorum", "raw", "consume", "quorum",
                            consumers=k, depth=self.mode.default_depth)

            def step(res: CaseResult = res, k: int = k) -> None:
                q = self.book.declare(f"multi{k}", "quorum")
                raw.publish_window(self.uri, q, self.mode.default_depth, timeout_s=self.mode.timeout_s)
                self.measure(res, lambda: raw_multi.consume_processes(self.uri, q, self.mode.default_depth, k,
                                                                      timeout_s=self.mode.timeout_s))
                self.book.delete(q)

            steps.append((f"raw quorum {k} consumer process(es)", step))
        return steps

    def latency(self) -> list[tuple[str, Callable[[], None]]]:
        """End-to-end latency at a steady offered rate: the raw stage loop, then the connector's stage."""
        m = self.mode
        rlat = self.case(f"raw: pika stage loop, e2e latency at {m.latency_rate:,.0f} msg/s · classic", "raw",
                         "latency", "classic")
        clat = self.case(f"stage, e2e latency at {m.latency_rate:,.0f} msg/s · classic", "connector", "latency",
                         "classic")

        def raw_probe() -> None:
            a, b = self.book.declare("lat-a", "classic"), self.book.declare("lat-b", "classic")
            holder: dict[str, Any] = {}
            ready = threading.Event()

            def start() -> None:
                def loop() -> None:
                    try:
                        raw.stage_loop(self.uri, a, b, m.latency_n, timeout_s=m.timeout_s, ready=ready)
                    except Exception as exc:  # noqa: BLE001 - surfaced through the probe's count
                        holder["error"] = exc
                holder["t"] = threading.Thread(target=loop, daemon=True)
                holder["t"].start()
                ready.wait(30)

            def stop() -> dict[str, Any]:
                holder["t"].join(m.timeout_s)
                return {}

            self.measure(rlat, lambda: conn.run_latency_probe(self.uri, a, b, m.latency_n, m.latency_rate,
                                                              start, stop))
            self.book.delete(a)
            self.book.delete(b)

        def conn_probe() -> None:
            if "stage" in self.missing:
                self.measure(clat, lambda: None, "stage")
                return
            a, b = self.book.declare("lat-c", "classic"), self.book.declare("lat-d", "classic")
            start, stop = conn.spark_stage_controls(self.spark, self.uri, a, b, self.workdir)
            self.measure(clat, lambda: conn.run_latency_probe(self.uri, a, b, m.latency_n, m.latency_rate,
                                                              start, stop), "stage")
            self.book.delete(a)
            self.book.delete(b)

        return [("latency raw", raw_probe), ("latency connector", conn_probe)]

    # -- the whole run ---------------------------------------------------------------------------
    def plan(self) -> list[tuple[str, Callable[[], None]]]:
        steps: list[tuple[str, Callable[[], None]]] = []
        for rep in range(self.mode.runs):
            for kind in ("classic", "quorum"):
                steps += [(f"run {rep + 1}: {label}", fn) for label, fn in self.amqp_chain(kind)]
            steps += [(f"run {rep + 1}: {label}", fn) for label, fn in self.stream_chain()]
            steps += [(f"run {rep + 1}: {label}", fn) for label, fn in self.sweep()]
            steps += [(f"run {rep + 1}: {label}", fn) for label, fn in self.latency()]
        return steps

    def close(self) -> None:
        """Stop the sampler, the queries still running and the Flight Recording; the session then ends the rest."""
        self.sampler.stop()
        if self.spark is not None:
            try:
                for q in self.spark.streams.active:
                    q.stop()
                said = conn.dump_jfr()
                if said:
                    print(f"Flight Recording: {said}", file=sys.stderr)
            except Exception:  # noqa: BLE001 - best effort at exit
                pass


def _connector_availability(bench: Bench) -> None:
    bench.missing = conn.connector_missing()
    # the stage needs both roles
    if "source" in bench.missing or "sink" in bench.missing:
        bench.missing["stage"] = "; ".join(bench.missing[r] for r in ("source", "sink") if r in bench.missing)
    if "source" in bench.missing:
        bench.missing.setdefault("stream source", bench.missing["source"])
    if "stream source" in bench.missing or "sink" in bench.missing:
        bench.missing["stream stage"] = "; ".join(
            bench.missing[r] for r in ("stream source", "sink") if r in bench.missing)
    for role, reason in bench.missing.items():
        bench.notes.append(f"connector {role} not available: {reason}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--quick", action="store_true", help="about two minutes, one run (default)")
    group.add_argument("--full", action="store_true", help="larger counts, medians of three runs")
    parser.add_argument("--uri", default=os.environ.get("SAFEBUNNY_BENCH_AMQP_URI", DEFAULT_URI))
    parser.add_argument("--out", type=Path, default=None,
                        help="where to write <mode>.json/.md/.png (default bench/results; nothing with --only)")
    parser.add_argument("--only", default=None,
                        help="run only the steps whose label contains one of these comma-separated texts "
                             "(e.g. 'connector classic' or 'rstream,stream sources'); for profiling, see "
                             "bench/profile.py")
    args = parser.parse_args(argv)
    mode = MODES["full" if args.full else "quick"]
    command = "make bench-full" if args.full else "make bench"
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

    from safebunny.optional import require

    tqdm = require("tqdm", "show the benchmark's progress").tqdm

    machine = describe_machine(broker_version(args.uri))
    with bench_session("safebunny-bench-") as session:
        bench = Bench(args.uri, mode, session)
        started = time.time()
        try:
            bench.streams = session.stream_broker(args.uri)
            bench.notes.append(bench.streams.said + ".")
            if bench.streams.uri != args.uri:
                bench.stream_book = session.book(bench.streams.uri, bench.book.prefix.removeprefix("bench-"))
            _connector_availability(bench)
            bench.sampler.start()
            if not all(r in bench.missing for r in ("source", "sink")):
                bench.spark = session.start_spark()
            wanted = None if args.only is None else [w.strip() for w in args.only.split(",") if w.strip()]
            steps = [s for s in bench.plan() if wanted is None or any(w in s[0] for w in wanted)]
            if not steps:
                parser.error(f"--only {args.only!r} matches no step; steps are: "
                             + ", ".join(label for label, _ in bench.plan()))
            with tqdm(total=len(steps), unit="step", dynamic_ncols=True, file=sys.stderr) as bar:
                for label, fn in steps:
                    bar.set_description(label)
                    fn()
                    bar.update(1)
        finally:
            bench.close()
    elapsed = time.time() - started
    machine["load average at end (1/5/15 min)"] = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    machine["duration"] = f"{elapsed:.0f} s ({mode.name} mode: {mode.runs} run(s), {mode.n_amqp:,} messages per "\
                          f"AMQP case, {mode.n_stream:,} per stream-protocol case)"
    bench.notes += [
        "Rates run from a case's first message to its last; for Spark queries, over the batches after the first "
        "non-empty one (a new query's cold start: reader process, Python workers, connections), whose size and "
        "duration are in the phase table; connection set-up is excluded on both sides. The sink on classic/quorum "
        "queues is timed by the queue's depth (sampled every 0.1 s); streams report no depth, so the stream sink is "
        "timed by the broker's chunk timestamps (read back with rstream). The sink writes with 2 tasks (2 "
        "connections), the raw publisher with one.",
        "The stream-protocol cases read a stream filled by rstream send_batch (large chunks); a stream filled over "
        "AMQP 0-9-1 has small chunks and reads much slower with rstream (see the 'pika-published stream' row).",
        "Memory is peak RSS (MB) during the case: driver JVM, the driver-side reader process "
        "(python_streaming_source_runner), and the Python workers summed (forked workers share pages).",
    ]
    results = [r for r in bench.results.values() if r.rates or r.e2e_ms or r.status != "ok"]
    for r in mark_unmeasured(results):
        bench.notes.append(f"{r.name}: {r.reason}.")
    targets = evaluate_targets(results)
    if args.only is not None and args.out is None:
        print(format_text(results, targets))
        return 0
    out = args.out or RESULTS
    out.mkdir(parents=True, exist_ok=True)
    stem = out / mode.name
    series = [{"case": label, "group": group, "t0": started,
               "points": [[round(t - started, 3), c] for t, c in points]} for label, group, points in bench.lines]
    Path(f"{stem}.json").write_text(results_to_json(results, targets, machine, command, bench.notes, series) + "\n")
    Path(f"{stem}.md").write_text(format_markdown(results, targets, machine, command, bench.notes))
    plot_throughput(bench.lines, started, Path(f"{stem}.png"), f"safebunny {command}: throughput over time")
    print(format_text(results, targets))
    print(f"\nwritten: {stem}.json, {stem}.md, {stem}.png ({elapsed:.0f} s)")
    if bench.errors.exists():
        print(f"tracebacks of the failed cases: {bench.errors}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
