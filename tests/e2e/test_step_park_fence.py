"""Issue 58, item 1, in one process: two live batches of two epochs on one order, batch a's handler failing it for
good (a ``poison_on`` error: its step parks it) and batch b's applying it, with real Delta tables and the shared
SparkSession. Batch a runs in a thread and stalls (the stall hook, :mod:`safebunny.crashpoints`) before it commits
its decisions, or after its effects (its parking committed); b runs meanwhile, then a resumes. The order ends in
one branch: applied once (in the ledger, never handed to ``on_failed`` as parked), or parked by both (never applied).
tests/e2e/test_park_fence.py runs the same with two driver processes and a saga."""

from __future__ import annotations

import json
import threading
import time

import pytest

import safebunny
from safebunny import crashpoints
from safebunny.delta.delta_rs import DeltaRsTarget
from safebunny.saga.run.parked_ids import ParkedIds

SCHEMA = "messageId string, value binary, correlationId string"


class ServiceDown(RuntimeError):
    """The service did not answer."""


def _step(tmp_path, epoch, parked_rows):
    inbox = str(tmp_path / "inbox")

    def parks(failed):  # a saga's router: ServiceDown is in poison_on
        return {f.message_id: {"reason": f.reason, "error_type": f.error_type, "attempt": 1, "redriven": None}
                for f in failed if f.error_type == "ServiceDown"}

    def on_failed(rows, ctx):
        parked_rows.extend((epoch, r.message_id) for r in rows)
        return {"parked": len(rows)}

    recorded = ParkedIds(str(tmp_path / "none.parked.json"), inbox, "stock")
    return safebunny.Step("stock", inbox, safebunny.StepSettings(epoch=epoch, on_failed=on_failed, parks=parks,
                                                                 parked=recorded.recorded, row_retries=0))


@pytest.mark.parametrize(("stall_at", "branch"), [("step.before_decisions", "applied"),
                                                  ("step.after_effects", "parked")])
def test_a_batch_parking_an_order_beside_one_applying_it_ends_in_one_branch(spark, tmp_path, monkeypatch, stall_at,
                                                                           branch):
    monkeypatch.setattr(crashpoints, "_seen", {})
    monkeypatch.setattr(crashpoints, "_failed", set())
    monkeypatch.setenv("SAFEBUNNY_STALL_AT", stall_at)
    monkeypatch.setenv("SAFEBUNNY_STALL_DIR", str(tmp_path))
    ledger = str(tmp_path / "ledger")
    batch = spark.createDataFrame([(f"o{i}", json.dumps({"n": i}).encode(), f"c{i}") for i in range(3)], SCHEMA)
    parked: list[tuple[str, str]] = []

    def down(order, ctx):
        raise ServiceDown(f"the stock service is down ({order['messageId']})")

    def up(order, ctx):
        return safebunny.Outcome(effects=[safebunny.append({"orderId": order["messageId"]}, ledger)])

    errors: list[BaseException] = []

    def stalled():
        try:
            _step(tmp_path, "EA", parked).process(batch, 3, down, rows=True)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    a = threading.Thread(target=stalled, daemon=True)
    a.start()
    deadline = time.monotonic() + 300
    while not (tmp_path / "stalled").exists():
        assert time.monotonic() < deadline and a.is_alive(), f"batch a never stalled: {errors}"
        time.sleep(0.05)
    monkeypatch.delenv("SAFEBUNNY_STALL_AT")  # b passes the same point: it must not stall
    _step(tmp_path, "EB", parked).process(batch, 0, up, rows=True)  # the new holder of the same orders
    (tmp_path / "release").touch()
    a.join(300)
    assert not a.is_alive() and not errors, errors
    table = DeltaRsTarget(ledger).read()
    applied = sorted(table.column("orderId").to_pylist()) if table is not None else []
    handed = sorted({mid for _, mid in parked})
    if branch == "applied":  # b's decision landed first: a leaves the orders to it, sends nothing for them
        assert (applied, parked) == (["o0", "o1", "o2"], []), (applied, parked)
    else:  # a's parkings landed first: b parks them as recorded, applies nothing
        assert (applied, handed) == ([], ["o0", "o1", "o2"]), (applied, parked)
        assert {e for e, _ in parked} == {"EA", "EB"} and len(parked) == 6, parked
