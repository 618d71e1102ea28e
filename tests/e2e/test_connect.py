"""safebunny over Spark Connect (Databricks serverless and standard-access compute): steps, sagas, the SQL id
functions, notebook 02, and serverless's run modes (``saga.run(trigger="availableNow")`` with metrics, and the
``safebunny run`` command), each through a Connect client process against the run's one Connect server."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_cli_session import SAGA_FILE

CLIENT = Path(__file__).with_name("connect_client.py")
SERVERLESS = Path(__file__).with_name("serverless.py")


def _client(connect_url, scenario, amqp_uri, workdir):
    done = subprocess.run([sys.executable, str(CLIENT), connect_url, scenario, amqp_uri, str(workdir)],
                          capture_output=True, text=True, timeout=600)
    (Path(workdir) / "client.log").write_text(done.stdout + "\n--- stderr ---\n" + done.stderr)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        errors = [ln for ln in done.stderr.splitlines() if ("Error" in ln or "Exception" in ln or "assert" in ln)
                  and not ln.strip().startswith("at ")]
        pytest.fail(f"connect client {scenario!r} failed (rc {done.returncode}):\n" +
                    "\n".join(errors[:30] or [done.stderr[-4000:]]))
    return json.loads(lines[-1].removeprefix("RESULT "))


def test_a_step_over_connect_applies_and_emits_each_message_once(connect_url, amqp_uri, tmp_path):
    result = _client(connect_url, "step", amqp_uri, tmp_path)
    want = sorted(f"m{i}" for i in range(12))
    assert result["effects"] == want, "each message's effect once, duplicates in and across runs dropped"
    assert len(result["emitted"]) == 12 and len(set(result["emitted"])) == 12, result["emitted"]
    assert result["left"] == 0


def test_a_saga_over_connect_started_twice_drains_exactly_once(connect_url, amqp_uri, tmp_path):
    result = _client(connect_url, "saga", amqp_uri, tmp_path)
    want = sorted(f"o{i}" for i in range(30))
    assert result["reservations"] == want and result["shipments"] == want
    stock = next(s for s in result["status"] if s["node"] == "stock")
    # counters come from the reports the server-side steps stored under the saga's root
    assert stock["received"] == 40 and stock["processed"] == 30 and stock["duplicates"] == 10, stock
    assert stock["batches"] >= 1 and stock["last_batch"] is not None
    assert [row["received"] for row in result["cli"] if row["node"] == "stock"] == [40]
    assert result["paused"][0].startswith("open until")
    assert sorted(result["trace"]) == ["shipping", "stock"]
    assert result["poison"] == 0 and result["redrive"] == 0 and result["waiting"] == 0
    assert "executors" in result["published_from"], "stock's first batch (30 emits) published from the executors"
    assert result["journal_read"] and all(result["journal_read"]), result["journal_read"]


def test_sql_id_functions_over_connect_equal_python(connect_url, amqp_uri, tmp_path):
    result = _client(connect_url, "sql", amqp_uri, tmp_path)
    assert result["auto"]["how"] == "jar"  # the local server takes the shim's jar
    assert result["python"]["how"] == "python"
    for how in ("auto", "python"):
        got = result[how]
        assert got["message_ids"] and all(sql == expected == py for sql, expected, py in got["message_ids"]), how
        assert got["correlation_ids"] and all(sql == expected == py for sql, expected, py in got["correlation_ids"])
        assert got["null"] is None


def test_notebook_02_over_connect(connect_url, amqp_uri, tmp_path):
    assert _client(connect_url, "notebook", amqp_uri, tmp_path) == {"ran": True}


def test_saga_run_available_now_over_connect_with_metrics(connect_url, amqp_uri, tmp_path):
    """saga.run(trigger="availableNow") under serverless's trigger rule (enforced in the client: see serverless.py),
    with SagaMetrics over Connect: with PySpark's listener (its events reach the client), and without one, where
    the progress gauges come from the steps' durable per-batch counters."""
    result = _client(connect_url, "serverless", amqp_uri, tmp_path)
    assert result["refusals"] == ["TriggerRefused"], "a processing-time trigger does not start under the rule"
    assert result["done"] == {"stock": 12, "shipping": 12, "stock received": 15}, result
    assert result["shipments"] == sorted(f"o{i}" for i in range(12)) and result["waiting"] == 0
    assert result["given_up"] == [] and sum(result["rounds"].values()) >= 2, result["rounds"]
    assert result["listeners"] == [True, False]
    saga = result["metrics"]["durable"][0].split('saga="', 1)[1].split('"', 1)[0]
    for kind, lines in result["metrics"].items():
        values = {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in lines}

        def metric(name, step, values=values):
            return values[f'{name}{{saga="{saga}",step="{step}"}}']

        assert metric("safebunny_step_processed_total", "shipping.StockReserved") == 12, kind
        assert metric("safebunny_step_duplicates_total", "stock.OrderPlaced") == 3, kind
        for step in ("stock.OrderPlaced", "shipping.StockReserved"):
            assert metric("safebunny_step_last_batch_id", step) >= 0, (kind, step)
            assert metric("safebunny_step_last_batch_seconds", step) > 0, (kind, step)
            assert metric("safebunny_step_query_active", step) in (0, 1), (kind, step)
            if kind == "durable":  # the last batch with messages, as its step recorded it
                assert metric("safebunny_step_last_batch_rows", step) >= 1, step
                assert metric("safebunny_step_processed_rows_per_second", step) > 0, step


def test_safebunny_run_once_and_continuous_over_connect(spark, connect_url, cli_env):
    """`safebunny run` as a serverless job task runs it: --once drains and says by its exit code that a message
    was parked; --continuous runs availableNow rounds until SIGTERM and exits 0. Both under the trigger rule."""
    import signal
    import time

    from safebunny.cli import exits
    from safebunny.cli.locate import load_saga
    from safebunny.delta.delta_rs import DeltaRsTarget

    saga = load_saga(SAGA_FILE)
    schema = "orderId string, qty int"
    saga.start(spark.createDataFrame([("order-0", 1), ("order-1", 1), ("order-bad", 1)], schema), node="orders",
               type="OrderPlaced", business_key="orderId")
    command = [sys.executable, str(SERVERLESS), "run", SAGA_FILE, "--remote", connect_url]
    once = subprocess.run([*command, "--once", "--timeout", "300", "--restarts", "6"], capture_output=True,
                          text=True, timeout=600)
    assert once.returncode == exits.PARKED, once.stderr[-3000:]
    assert "1 message(s) parked in this run" in once.stdout and "poison list" in once.stderr

    saga.start(spark.createDataFrame([("order-2", 1), ("order-3", 1)], schema), node="orders", type="OrderPlaced",
               business_key="orderId")
    with subprocess.Popen([*command, "--continuous"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True) as running:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and running.poll() is None:
            if {s.node: s.processed for s in saga.status()}.get("shipping") == 4:
                break
            time.sleep(1)
        running.send_signal(signal.SIGTERM)
        out, err = running.communicate(timeout=120)
    assert running.returncode == exits.OK, err[-3000:]
    assert "availableNow rounds" in out and "stopping" in out
    shipped = DeltaRsTarget(str(cli_env / "shipments")).read().column("orderId").to_pylist()
    assert sorted(shipped) == ["order-0", "order-1", "order-2", "order-3"]
