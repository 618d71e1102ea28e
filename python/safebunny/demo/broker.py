"""The demo's broker: the local one, started when nothing answers."""

from __future__ import annotations

import shutil
import subprocess
import time

from safebunny.uri import redact

__all__: list[str] = []

DEFAULT_URI = "amqp://guest:guest@127.0.0.1:5672/%2F"


def answers(uri: str) -> bool:
    """True when a broker accepts a connection at ``uri``."""
    import pika

    try:
        pika.BlockingConnection(pika.URLParameters(uri)).close()
        return True
    except Exception:
        return False


def ensure_broker(uri: str, explicit: bool) -> None:
    """Start the machine's own ``rabbitmq-server`` when nothing answers on the default URI.

    A URI the user gave (``explicit``) is never second-guessed: if it does not answer, say so.
    """
    if answers(uri):
        return
    if explicit or not shutil.which("rabbitmq-server"):
        raise SystemExit(f"No RabbitMQ broker answers at {redact(uri)}: start one (rabbitmq-server -detached) "
                         "or set SAFEBUNNY_DEMO_URI.")
    print("no broker on 127.0.0.1:5672: starting rabbitmq-server -detached")
    subprocess.run(["rabbitmq-server", "-detached"], check=False)
    deadline = time.monotonic() + 90
    while not answers(uri):
        if time.monotonic() > deadline:
            raise SystemExit("rabbitmq-server did not answer within 90 s; see its logs under /var/log/rabbitmq")
        time.sleep(1)
