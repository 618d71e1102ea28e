"""The ``safebunny`` command against a real broker, Spark and Delta, with the small saga of
``cli_saga.py``: topology declare/show, status, poison list/show, redrive after a fix, trace."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from safebunny.cli import exits
from safebunny.cli.main import main
from safebunny.ids import correlation_id_for

pytestmark = pytest.mark.xdist_group("drivers")  # tests/xdist_units.py: drivers of their own

SAGA_FILE = str(Path(__file__).with_name("cli_saga.py"))


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, object]:
    rc = main([*argv, "--json"])
    out = capsys.readouterr().out
    return rc, orjson.loads(out) if out.strip().startswith(("[", "{")) else out


def test_operator_session(spark, cli_env: Path, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    from safebunny.cli.locate import load_saga

    rc, declared = _json(capsys, "topology", "declare", SAGA_FILE)
    assert rc == 0 and any(r["kind"] == "queue" for r in declared)
    assert main(["topology", "declare", SAGA_FILE]) == 0           # idempotent
    capsys.readouterr()
    rc, shown = _json(capsys, "topology", "show", SAGA_FILE)
    assert rc == 0 and {r["name"] for r in declared} <= {r["name"] for r in shown}

    saga = load_saga(SAGA_FILE)
    orders = [{"orderId": f"order-{i}", "qty": 1} for i in range(5)] + [{"orderId": "order-bad", "qty": 1}]
    saga.start(spark.createDataFrame(orders, "orderId string, qty int"), node="orders", type="OrderPlaced",
               business_key="orderId")
    saga.drain(spark)

    rc, status = _json(capsys, "status", SAGA_FILE)
    assert rc == 0
    assert {r["step"] for r in status} == {"stock.OrderPlaced", "shipping.StockReserved"}
    assert all(r["backlog"] == 0 for r in status)

    rc, parked = _json(capsys, "poison", "list", SAGA_FILE)
    assert rc == 0 and len(parked) == 1
    bad = parked[0]
    assert bad["correlationId"] == correlation_id_for("order-bad")
    assert "sku not in the catalogue" in bad["reason"] and bad["attempts"] >= 2
    assert bad["state"] == "parked" and bad["parkedAt"]
    rc, shown_one = _json(capsys, "poison", "show", SAGA_FILE, "--id", bad["messageId"])
    assert rc == 0 and shown_one["messageId"] == bad["messageId"]
    assert "sku not in the catalogue" in shown_one["headers"]["x-safebunny-reason"]
    assert main(["poison", "show", SAGA_FILE, "--id", "no-such-id"]) == exits.NOT_FOUND
    assert main(["poison", "discard", SAGA_FILE, "--id", "no-such-id", "--reason", "typo"]) == exits.NOT_FOUND
    assert main(["poison", "redrive", SAGA_FILE, "--error-type", "NoSuchError"]) == exits.NOT_FOUND
    capsys.readouterr()

    (cli_env / "fixed").touch()                                    # the fix
    rc, redriven = _json(capsys, "poison", "redrive", SAGA_FILE, "--step", "stock", "--all")
    assert rc == 0 and redriven == [{"step": "stock.OrderPlaced", "redriven": 1}]
    load_saga(SAGA_FILE).drain(spark)
    rc, after = _json(capsys, "poison", "list", SAGA_FILE)
    assert rc == 0 and after == []                                  # resolved entries are hidden
    rc, every = _json(capsys, "poison", "list", SAGA_FILE, "--all")
    assert [r["state"] for r in every] == ["resolved"]

    from safebunny.demo.run import read_table

    shipped = [r["orderId"] for r in read_table(str(cli_env / "shipments"), ["orderId"])]
    assert sorted(shipped) == sorted(o["orderId"] for o in orders)   # each once, the bad one after the fix

    rc, path = _json(capsys, "trace", SAGA_FILE, "order-bad")
    assert rc == 0
    steps = [r["step"] for r in path]
    assert steps[0] == "stock.OrderPlaced" and "shipping.StockReserved" in steps
    assert main(["trace", SAGA_FILE, "order-never-placed"]) == exits.NOT_FOUND


def test_console_script_status_and_errors(cli_env: Path, amqp_uri: str) -> None:
    exe = str(Path(sys.executable).with_name("safebunny"))
    ok = subprocess.run([exe, "topology", "declare", SAGA_FILE], capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    status = subprocess.run([exe, "status", SAGA_FILE], capture_output=True, text=True, timeout=120)
    assert status.returncode == 0, status.stderr
    assert status.stdout.splitlines()[0].split()[:4] == ["step", "state", "backlog", "ready"]
    down = subprocess.run([exe, "status", SAGA_FILE, "--uri", "amqp://guest:hunter2@127.0.0.1:1/%2F"],
                          capture_output=True, text=True, timeout=120)
    assert down.returncode == exits.BROKER, down.stderr
    assert "hunter2" not in down.stderr + down.stdout
