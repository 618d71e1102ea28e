"""How long a delivery waits for its ack under the queue source, against a broker's consumer_timeout.

    python -m bench.bench_ack_age [--durations 0.3,0.6,0.9,1.2] [--batches 8] [--batch 20] [--timeout-ms 2000]

Starts a throwaway ``rabbitmq-server`` (tests/brokers.py) with a short ``consumer_timeout`` (checked every
500 ms), then drives the classic-queue reader as Spark does (``latestOffset`` of batch N+1, ``commit`` of
batch N, then batch N+1 runs for ``duration`` seconds). The reader prefetches two batches, so a delivery
is buffered while the previous batch runs and acked after its own batch: about two batch durations.
Reports, per batch duration, the oldest delivery's age when its batch was acked (measured from the moment
the broker's delivery reached the consumer), the acks lost because the broker closed the channel, and
whether the reader failed clearly.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import deque
from pathlib import Path

import pika

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from brokers import ThrowawayBroker  # noqa: E402
from pyspark_safebunny.queue_reader import SafeBunnyQueueReader  # noqa: E402
from pyspark_safebunny.schema import schema_for  # noqa: E402
from safebunny.errors import SafeBunnyError  # noqa: E402
from safebunny.options.source import SOURCE_OPTIONS, parse_source_options  # noqa: E402
from safebunny.queues.consumer import QueueConsumer  # noqa: E402

__all__ = ["main"]


class _Stamped(deque):
    """The consumer's buffer, noting when each delivery arrived (for the measurement only)."""

    def __init__(self) -> None:
        super().__init__()
        self.arrived: dict[tuple[int, int], float] = {}

    def append(self, delivery) -> None:  # type: ignore[no-untyped-def, override]
        self.arrived[(delivery.generation, delivery.delivery_tag)] = time.monotonic()
        super().append(delivery)


class _StampingConsumer(QueueConsumer):
    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self._buffer = _Stamped()


def _run(uri: str, queue: str, duration: float, batches: int, batch: int, timeout_ms: int) -> dict:
    raw = {"uri": uri, "queue": queue, "queueType": "classic", "journalLocation": f"/tmp/bench-ack-age-{queue}",
           "maxMessagesPerTrigger": str(batch)}
    if any(spec.name == "consumerTimeoutMs" for spec in SOURCE_OPTIONS):  # absent before S4
        raw["consumerTimeoutMs"] = str(timeout_ms)
    options = parse_source_options(raw)
    reader = SafeBunnyQueueReader(options, schema_for(False, True))
    reader.source._consumer = _StampingConsumer(uri, queue, prefetch=reader.source.prefetch()).start()
    stamps: _Stamped = reader.source._consumer._buffer  # type: ignore[assignment]
    first_of: dict[int, tuple[int, int]] = {}
    ages, lost, failure = [], 0, None
    start, previous = reader.initialOffset(), None
    try:
        for _ in range(batches):
            before = dict(reader.source._pending)
            end = reader.latestOffset(start, reader.getDefaultReadLimit())
            new = [s for s in reader.source._pending if s not in before]
            for s in new:
                generation, tag, count = reader.source._pending[s]
                first_of[s] = (generation, tag - count + 1)
            if previous is not None and int(previous["seq"]) in first_of:
                key = first_of[int(previous["seq"])]
                arrived = stamps.arrived.get(key)
                generation_before = reader.source._consumer.generation
                reader.commit(previous)
                if key[0] != generation_before:
                    lost += 1
                elif arrived is not None:
                    ages.append(time.monotonic() - arrived)
            elif previous is not None:
                reader.commit(previous)
            for p in reader.partitions(start, end):
                for _b in reader.read(p):
                    pass
            time.sleep(duration)  # the batch's work
            previous, start = end, end
    except SafeBunnyError as exc:
        failure = str(exc)
    finally:
        generations = reader.source._consumer.generation if reader.source._consumer else 0
        reader.stop()
    return {"ages": ages, "lost": lost, "closures": generations - 1, "failure": failure}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--durations", default="0.3,0.6,0.9,1.2")
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--batch", type=int, default=20)
    parser.add_argument("--timeout-ms", type=int, default=2000)
    args = parser.parse_args(argv)
    broker = ThrowawayBroker(plugins=(), extra_config=(f"consumer_timeout = {args.timeout_ms}",),
                             advanced_config="[{rabbit, [{channel_tick_interval, 500}]}].").start()
    try:
        print(f"consumer_timeout {args.timeout_ms} ms; batches of {args.batch} (prefetch {2 * args.batch}); "
              f"{args.batches} batches per duration")
        for i, duration in enumerate(float(d) for d in args.durations.split(",")):
            queue = f"bench-ack-age-{i}"
            conn = pika.BlockingConnection(pika.URLParameters(broker.uri))
            ch = conn.channel()
            ch.queue_declare(queue, durable=True)
            for n in range(args.batch * (args.batches + 4)):
                ch.basic_publish("", queue, b"m%d" % n, pika.BasicProperties(delivery_mode=2))
            conn.close()
            r = _run(broker.uri, queue, duration, args.batches, args.batch, args.timeout_ms)
            worst = max(r["ages"]) if r["ages"] else float("nan")
            print(f"batch duration {duration:.1f} s: oldest delivery at its ack max {worst:.2f} s "
                  f"({len(r['ages'])} acks), acks lost {r['lost']}, channel closures {r['closures']}, "
                  f"failed clearly: {'yes: ' + r['failure'][:140] if r['failure'] else 'no'}")
    finally:
        broker.destroy()


if __name__ == "__main__":
    main()
