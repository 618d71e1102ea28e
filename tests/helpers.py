"""Plain helpers the tests call (not fixtures): a broker admin, publishing numbered messages, queue counts, a queue
reader as Spark builds it, waiting for a condition, and running driver scripts as processes of their own."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from brokers import Broker

__all__ = ["Admin", "publish_numbered", "queue_reader", "queue_totals", "restart_in_one_driver", "run_drivers",
           "wait_until"]


class Admin:
    """Broker-side helpers for tests: declare, publish, read back, count."""

    def __init__(self, uri: str) -> None:
        import pika

        self.uri = uri
        self.connection = pika.BlockingConnection(pika.URLParameters(uri))
        self.channel = self.connection.channel()

    def _ch(self):  # type: ignore[no-untyped-def]
        """The channel, on a new connection when the broker dropped this one: a blocking connection sends no
        heartbeats while the test waits for a driver, so after a few idle minutes the broker resets it."""
        import pika

        try:
            self.connection.process_data_events(0)
        except pika.exceptions.AMQPError:
            pass
        if self.connection.is_closed:
            self.connection = pika.BlockingConnection(pika.URLParameters(self.uri))
            self.channel = self.connection.channel()
        elif self.channel.is_closed:
            self.channel = self.connection.channel()
        return self.channel

    def declare_queue(self, name: str, kind: str = "classic", arguments: dict | None = None) -> str:
        args = dict(arguments or {})
        if kind != "classic":
            args["x-queue-type"] = kind
        self._ch().queue_declare(name, durable=True, arguments=args)
        return name

    def publish(self, queue: str, bodies: list[bytes], properties: list | None = None,
                exchange: str = "") -> None:
        import pika

        ch = self._ch()
        ch.confirm_delivery()
        for i, body in enumerate(bodies):
            props = properties[i] if properties else pika.BasicProperties(delivery_mode=2)
            ch.basic_publish(exchange, queue, body, props, mandatory=False)

    def ready(self, queue: str) -> int:
        """Messages ready in ``queue`` (a passive declare; unacked messages are not counted)."""
        return self._ch().queue_declare(queue, passive=True).method.message_count

    def get_all(self, queue: str, limit: int = 1_000_000) -> list:
        """Take every ready message off ``queue`` (acked); returns (method, properties, body)."""
        out = []
        ch = self._ch()
        while len(out) < limit:
            method, props, body = ch.basic_get(queue, auto_ack=True)
            if method is None:
                break
            out.append((method, props, body))
        return out

    def delete_queue(self, name: str) -> None:
        try:
            self._ch().queue_delete(name)
        except Exception:
            pass

    def delete_exchange(self, name: str) -> None:
        try:
            self._ch().exchange_delete(name)
        except Exception:
            pass

    def close(self) -> None:
        try:
            self.connection.close()
        except Exception:
            pass


def wait_until(condition, timeout: float = 60.0, what: str = "condition", every: float = 0.1) -> None:  # type: ignore[no-untyped-def]
    """Poll ``condition()`` until it is true; fail naming ``what`` after ``timeout`` seconds."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")


def run_drivers(commands: list[tuple[list[str], dict[str, str]]], timeout: float, at_once: int = 2) -> list:
    """Run each ``(argv, env)`` as a process of its own (a new session, so a kill point's ``kill -9`` ends only
    it), at most ``at_once`` at a time; their ``CompletedProcess`` results in the order given. A kill matrix's
    drivers are independent (own queues, folders and checkpoints), and a crash driver spends much of its life
    starting a JVM and waiting on the broker: two at a time by default."""
    import subprocess
    from concurrent.futures import ThreadPoolExecutor

    def run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:  # type: ignore[type-arg]
        return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout, start_new_session=True)

    with ThreadPoolExecutor(max(1, at_once)) as pool:
        return [f.result() for f in [pool.submit(run, argv, env) for argv, env in commands]]


def restart_in_one_driver(driver: Path, uri: str, scenarios: list[dict], env: dict[str, str] | None = None) -> Any:
    """One process of the driver script ``driver`` that restarts every scenario (each killed in a driver of its
    own before: :func:`run_drivers`) one after another, from ``SAFEBUNNY_TEST_SCENARIOS``: one Spark session
    start for all of a kill matrix's restarts. Its ``CompletedProcess``. ``env``: more of its environment."""
    import subprocess

    env = {**{k: v for k, v in os.environ.items() if k != "SAFEBUNNY_CRASH_AT"}, **(env or {})}
    env["SAFEBUNNY_TEST_SCENARIOS"] = json.dumps(scenarios)
    return subprocess.run([sys.executable, str(driver), uri], env=env, capture_output=True, text=True,
                          timeout=120 + 120 * len(scenarios), start_new_session=True)


def publish_numbered(uri: str, queue: str, n: int, start: int = 0, body=None, **props) -> None:  # type: ignore[no-untyped-def]
    """Publish ``n`` persistent messages with ids ``m<start>..``, confirmed; ``body(i)`` makes bodies."""
    import pika

    conn = pika.BlockingConnection(pika.URLParameters(uri))
    ch = conn.channel()
    ch.confirm_delivery()
    for i in range(start, start + n):
        payload = body(i) if body else f"m{i}".encode()
        ch.basic_publish("", queue, payload, pika.BasicProperties(message_id=f"m{i}", delivery_mode=2, **props))
    conn.close()


def queue_totals(broker: Broker, queue: str) -> tuple[int, int]:
    """``(ready, unacked)`` of ``queue`` as the broker counts them (rabbitmqctl)."""
    if broker.ctl is None:
        raise RuntimeError(f"queue_totals needs rabbitmqctl access to {broker.origin}")
    out = broker.ctl("list_queues", "-q", "--no-table-headers", "name", "messages_ready", "messages_unacknowledged")
    for line in out.splitlines():
        cols = line.split()
        if cols and cols[0] == queue:
            return int(cols[1]), int(cols[2])
    raise KeyError(queue)


def queue_reader(uri: str, queue: str, journal: str, **extra: str):  # type: ignore[no-untyped-def]
    """The reader of a classic queue as Spark builds it (options parsed, schema derived), for tests that drive
    ``latestOffset``/``partitions``/``read``/``commit`` themselves."""
    from pyspark_safebunny.queue_reader import SafeBunnyQueueReader
    from pyspark_safebunny.schema import schema_for
    from safebunny.options.source import parse_source_options

    options = parse_source_options({"uri": uri, "queue": queue, "queueType": "classic", "journalLocation": journal,
                                    **extra})
    return SafeBunnyQueueReader(options, schema_for(options.include_headers, True))
