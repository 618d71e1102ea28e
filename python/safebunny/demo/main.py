"""``make demo`` (``python -m safebunny.demo``): the fulfilment saga end to end on the local broker.

1. Starts the machine's ``rabbitmq-server`` if nothing answers (``SAFEBUNNY_DEMO_URI`` picks another
   broker) and declares the saga's topology under a name of its own (``--name``).
2. Starts ``--orders`` orders with ``saga.start`` (ids from the order number), publishes a share of them
   a second time (duplicates), a share with a card that is declined, and a share of malformed bodies.
3. Runs the saga with ``saga.drain(spark)`` under a progress bar, then prints a summary that checks
   itself (see :mod:`safebunny.demo.checks`) and writes a chart of throughput and backlog per step
   (bar and chart with ``safebunny[plots]``).
4. Deletes the saga's queues and exchanges (``--keep`` keeps them to look around).

Exit code 0 when every check passed, 1 when one failed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from safebunny.uri import redact

__all__ = ["main"]

DEFAULT_URI = "amqp://guest:guest@127.0.0.1:5672/%2F"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The demo's options."""
    p = argparse.ArgumentParser(prog="python -m safebunny.demo", description=__doc__.split("\n\n")[0])
    p.add_argument("--orders", type=int, default=2000, help="orders to start (default 2000)")
    p.add_argument("--declined", type=float, default=0.10, help="share of orders whose payment is declined")
    p.add_argument("--malformed", type=float, default=0.02, help="share of orders with a body that does not parse")
    p.add_argument("--duplicates", type=float, default=0.05, help="share of orders published twice")
    p.add_argument("--dir", default=os.environ.get("SAFEBUNNY_DEMO_DIR", ".demo"),
                   help="work directory for checkpoints, inboxes, tables and the chart (default .demo)")
    p.add_argument("--tables", default=None, metavar="SCHEMA",
                   help="keep every Delta table (the saga's and the demo's) by name in this schema (Delta Spark in the "
                        "session); --dir then holds plain files only and may be a Unity Catalog volume")
    p.add_argument("--checkpoints", default=None, metavar="DIR",
                   help="the Spark checkpoints' folder (default: under --dir; give one apart from a volume)")
    p.add_argument("--name", default=None,
                   help="saga name (default safebunny-demo-<random>, new each run); its queues are named after it")
    p.add_argument("--keep", action="store_true",
                   help="keep the saga's queues and exchanges on the broker to look around (deleted by default)")
    p.add_argument("--no-bar", action="store_true", help="no progress bar (for logs)")
    args = p.parse_args(argv)
    if args.orders < 1:
        p.error(f"--orders must be >= 1, got {args.orders}")
    return args


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


def _spark() -> Any:
    from pyspark.sql import SparkSession

    from safebunny.spark.conf import use_local_checkpoints

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (SparkSession.builder.master("local[2]").appName("safebunny-demo")
               .config("spark.ui.enabled", "false").config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.sql.shuffle.partitions", "2"))
    spark = use_local_checkpoints(builder).getOrCreate()  # the demo's checkpoints are under --dir
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def main(argv: list[str] | None = None, spark: Any = None) -> int:
    """Run the demo; returns 0 when every check passed. ``spark``: an existing session (tests)."""
    from safebunny.demo import run
    from safebunny.optional import INSTALL

    args = parse_args(argv)
    uri = os.environ.get("SAFEBUNNY_DEMO_URI", DEFAULT_URI)
    ensure_broker(uri, explicit="SAFEBUNNY_DEMO_URI" in os.environ)
    work = Path(args.dir).resolve()
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    print(f"safebunny demo: broker {redact(uri)}, work dir {work}")
    started = time.monotonic()
    own = spark is None
    spark = spark or _spark()
    try:
        summary, chart, elapsed = run.run(spark, uri, work, args)
    finally:
        if own:
            spark.stop()
    print(f"saga drained in {elapsed:.1f} s ({time.monotonic() - started:.1f} s in all, Spark start included)")
    print("summary:")
    for line in summary.lines():
        print(line)
    print(f"chart: {chart}" if chart is not None else
          f"chart: not drawn (pip install {INSTALL['matplotlib']} to draw it)")
    return 0 if summary.ok else 1
