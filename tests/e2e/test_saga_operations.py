"""Operating a saga from another process, against a real broker, Spark and Delta, with the small saga of
``cli_saga.py``: counters recorded per batch (``safebunny status`` in a second process shows what the
draining process counted), instances as SQL and on the command line, and Prometheus metrics."""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import orjson

from helpers import wait_until
from safebunny.cli.locate import load_saga
from safebunny.saga.look.metrics import SagaMetrics

SAGA_FILE = str(Path(__file__).with_name("cli_saga.py"))
EXE = str(Path(sys.executable).with_name("safebunny"))
COUNTERS = ("batches", "received", "processed", "duplicates", "failed", "retried", "parked")


def _cli(*argv: str) -> list[dict]:
    """Run ``safebunny ... --json`` in its own process (a second process reading the saga's state)."""
    out = subprocess.run([EXE, *argv, SAGA_FILE, "--json"], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ))
    assert out.returncode == 0, out.stderr
    return orjson.loads(out.stdout)


def _metric(text: str, name: str, step: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(f"{name}{{") and f'step="{step}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return None


def test_status_instances_and_metrics_from_anywhere(spark, cli_env: Path) -> None:  # type: ignore[no-untyped-def]
    saga = load_saga(SAGA_FILE)
    metrics = SagaMetrics(saga, port=0).start(spark)
    try:
        orders = [{"orderId": f"order-{i}", "qty": 1} for i in range(3)] + [{"orderId": "order-bad", "qty": 1}]
        saga.start(spark.createDataFrame(orders, "orderId string, qty int"), node="orders", type="OrderPlaced",
                   business_key="orderId")
        saga.drain(spark)

        # status in a second process: the counters the draining process recorded, not zeros
        here = {f"{s.node}.{s.type}": s for s in saga.status()}
        there = {r["step"]: r for r in _cli("status")}
        stock, shipping = there["stock.OrderPlaced"], there["shipping.StockReserved"]
        assert (stock["received"], stock["processed"], stock["failed"], stock["retried"], stock["parked"]) == (
            5, 3, 2, 1, 1)  # order-bad: failed, one retry tier, failed again, parked
        assert (shipping["received"], shipping["processed"], shipping["duplicates"]) == (3, 3, 0)
        assert stock["batches"] >= 2 and stock["lastBatch"] is not None
        for step, row in there.items():
            assert {c: row[c] for c in COUNTERS} == {c: getattr(here[step], c) for c in COUNTERS}
            assert (row["unacked"] is None) == bool(row["note"])  # unknown only with the reason why
            assert (row["state"], row["state_detail"]) == (here[step].state, here[step].state_detail)
        assert (stock["state"], shipping["state"]) == ("failing", "idle")  # order-bad parked just now; all drained

        # instances: on the command line (no Spark) and as a SQL view
        parked = _cli("instances", "--state", "parked")
        assert [(r["businessKey"], r["step"]) for r in parked] == [("order-bad", "stock.OrderPlaced")]
        assert "sku not in the catalogue" in parked[0]["reason"]
        frame = saga.instances(spark)
        assert frame.count() == 4
        states = dict(spark.sql(f"SELECT state, count(*) FROM {saga.name.replace('-', '_')}_instances "
                                "GROUP BY state").collect())
        assert states == {"completed": 3, "parked": 1}

        # metrics: the durable counters and the listener's last progress of each step
        def scrape() -> str:
            with urllib.request.urlopen(metrics.url, timeout=30) as response:
                return response.read().decode()

        wait_until(lambda: _metric(scrape(), "safebunny_step_last_batch_id", "shipping.StockReserved") is not None,
                   timeout=60, what="the listener's progress of the shipping step")
        text = scrape()
        assert _metric(text, "safebunny_step_received_total", "stock.OrderPlaced") == 5
        assert _metric(text, "safebunny_step_parked_total", "stock.OrderPlaced") == 1
        assert _metric(text, "safebunny_step_backlog", "stock.OrderPlaced") == 0
        assert _metric(text, "safebunny_step_query_active", "stock.OrderPlaced") == 0  # availableNow ended
    finally:
        metrics.stop()
