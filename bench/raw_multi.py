"""The broker's ceiling: several pika consumers, each in its own process, on one queue.

:func:`consume_processes` starts ``consumers`` processes (``spawn``), each with its own connection
(prefetch 1,000, ``multiple`` acks every 250, as :func:`bench.raw.consume_multiple`), waits until every
one is connected and subscribed, then lets them consume ``n`` messages between them (an equal share
each). The run spans the first delivery in any process to the last in any; the connections' set-up is
left out, as everywhere in the harness. With one process this is the single-consumer ceiling in a
process of its own; the best of 1, 2 and 4 is what the broker itself gives to a queue's consumers on
this machine (:func:`best_of`), the ceiling a source reading with several readers could reach.
"""

from __future__ import annotations

import multiprocessing as mp
import time
from typing import Any

from bench.raw import BenchError, Run

__all__ = ["CONSUMERS", "best_of", "consume_processes", "shares"]

#: The consumer counts of the multi-consumer ceiling.
CONSUMERS = (1, 2, 4)


def shares(n: int, consumers: int) -> list[int]:
    """``n`` messages split into ``consumers`` shares that differ by at most one, largest first."""
    if consumers < 1:
        raise ValueError(f"consumers must be at least 1, got {consumers}")
    base, extra = divmod(n, consumers)
    return [base + (1 if i < extra else 0) for i in range(consumers)]


def best_of(rates: dict[int, float | None]) -> tuple[int, float] | None:
    """The consumer count with the highest rate and that rate, or None when none was measured."""
    measured = [(k, r) for k, r in rates.items() if r]
    return max(measured, key=lambda kv: kv[1]) if measured else None


def _consumer(uri: str, queue: str, n: int, prefetch: int, ack_every: int, ready: Any, go: Any, out: Any,
              timeout_s: float) -> None:
    import pika

    try:
        conn = pika.BlockingConnection(pika.URLParameters(uri))
        ch = conn.channel()
        ch.basic_qos(prefetch_count=prefetch)
        state = {"count": 0, "t0": 0.0, "t1": 0.0}

        def on_message(channel: object, method: Any, props: object, body: bytes) -> None:
            if state["count"] >= n:
                return
            if state["count"] == 0:
                state["t0"] = time.time()
            state["count"] += 1
            if state["count"] % ack_every == 0 or state["count"] == n:
                ch.basic_ack(method.delivery_tag, multiple=True)
            if state["count"] == n:
                state["t1"] = time.time()

        ready.release()
        go.wait(timeout_s)
        tag = ch.basic_consume(queue, on_message)
        deadline = time.monotonic() + timeout_s
        while state["count"] < n and time.monotonic() < deadline:
            conn.process_data_events(time_limit=0.2)
        ch.basic_cancel(tag)
        conn.close()
        out.put((state["count"], state["t0"], state["t1"], ""))
    except Exception as exc:  # noqa: BLE001 - reported to the parent as this consumer's failure
        out.put((0, 0.0, 0.0, f"{type(exc).__name__}: {exc}"))


def consume_processes(uri: str, queue: str, n: int, consumers: int, prefetch: int = 1000, ack_every: int = 250,
                      timeout_s: float = 300.0) -> Run:
    """Consume ``n`` messages of ``queue`` with ``consumers`` pika consumers in processes of their own."""
    ctx = mp.get_context("spawn")
    ready, go, out = ctx.Semaphore(0), ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_consumer, args=(uri, queue, share, prefetch, ack_every, ready, go, out, timeout_s),
                         daemon=True) for share in shares(n, consumers)]
    for p in procs:
        p.start()
    try:
        for _ in procs:
            if not ready.acquire(timeout=60):
                raise BenchError(f"a consumer process of {queue!r} did not connect within 60 s")
        go.set()
        got = [out.get(timeout=timeout_s + 30) for _ in procs]
    finally:
        for p in procs:
            p.join(10)
            if p.is_alive():
                p.kill()
    errors = [e for *_, e in got if e]
    count = sum(c for c, *_ in got)
    if errors or count < n:
        raise BenchError(f"{consumers} consumer processes read {count} of {n} messages of {queue!r}"
                         + (f": {errors[0]}" if errors else ""))
    start, end = min(t0 for _, t0, _, _ in got), max(t1 for _, _, t1, _ in got)
    return Run(count, start, end, [(start, 0), (end, count)])
