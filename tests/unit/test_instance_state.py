"""Saga instance states from inbox rows, parked messages and started records (pure)."""

from __future__ import annotations

import datetime as dt
from types import SimpleNamespace

from safebunny.ids import correlation_id_for, message_id
from safebunny.saga.look.instance_state import instance_rows
from safebunny.saga.look.parked import Parked

T0 = dt.datetime(2026, 11, 23, 12, 0, tzinfo=dt.timezone.utc)


def _step(node: str, consumes: str, from_node: str, produces: tuple[str, ...] = (), compensates: str | None = None,
          fails_as: str | None = None) -> SimpleNamespace:
    return SimpleNamespace(node=node, consumes=consumes, from_node=from_node, produces=produces,
                           compensates=compensates, fails_as=fails_as, label=f"{node}.{consumes}")


STEPS = [_step("stock", "OrderPlaced", "orders", ("StockReserved",)),
         _step("payment", "StockReserved", "stock", ("PaymentCharged", "PaymentDeclined", "Invoice")),
         _step("shipping", "PaymentCharged", "payment"),
         _step("stock", "PaymentDeclined", "payment", compensates="OrderPlaced")]


def _path(key: str, steps: list[tuple[str, str, str | None, str]], minutes: int = 0) -> list[dict]:
    """Inbox rows of one instance: (node, type, emitted type or None, status) in order, ids derived."""
    corr = correlation_id_for(key)
    mid = message_id(corr, "orders", "OrderPlaced", 0)
    rows = []
    for i, (node, mtype, emits, status) in enumerate(steps):
        emitted = [message_id(mid, node, emits, 0)] if emits and status == "done" else []
        rows.append({"node": node, "messageId": mid, "correlationId": corr, "type": mtype, "status": status,
                     "reason": "boom" if status == "failed" else None, "emitted": emitted,
                     "processedAt": T0 + dt.timedelta(minutes=minutes, seconds=i)})
        if emitted:
            mid = emitted[0]
    return rows


def _parked(row: dict, reason: str, **more: object) -> Parked:
    """``row``'s message parked by its step (payment.StockReserved), as read_parked gives it."""
    return Parked(step="payment.StockReserved", offset=0, messageId=row["messageId"],
                  correlationId=row["correlationId"], type="StockReserved", reason=reason, errorType="ValueError",
                  attempts=3, firstFailure=None, parkedAt=None, body="{}", **more)  # type: ignore[arg-type]


def test_each_state_and_its_step() -> None:
    inbox = [
        *_path("done", [("stock", "OrderPlaced", "StockReserved", "done"),
                        ("payment", "StockReserved", "PaymentCharged", "done"),
                        ("shipping", "PaymentCharged", None, "done")]),
        *_path("comp", [("stock", "OrderPlaced", "StockReserved", "done"),
                        ("payment", "StockReserved", "PaymentDeclined", "done"),
                        ("stock", "PaymentDeclined", None, "done")]),
        *_path("flight", [("stock", "OrderPlaced", "StockReserved", "done")]),
        *_path("retry", [("stock", "OrderPlaced", "StockReserved", "done"),
                         ("payment", "StockReserved", None, "failed")]),
        *_path("stuck", [("stock", "OrderPlaced", "StockReserved", "done"),
                         ("payment", "StockReserved", None, "failed")]),
        *_path("external", [("stock", "OrderPlaced", "StockReserved", "done"),
                            ("payment", "StockReserved", "Invoice", "done")]),  # Invoice leaves the saga
    ]
    stuck = [r for r in inbox if r["correlationId"] == correlation_id_for("stuck") and r["status"] == "failed"][0]
    parked = [_parked(stuck, "card refused")]
    started = [{"businessKey": k, "correlationId": correlation_id_for(k), "startedAt": T0 - dt.timedelta(seconds=1)}
               for k in ("done", "comp", "flight", "retry", "stuck", "external", "queued")]
    table = instance_rows(inbox, STEPS, parked, started)
    got = {r["businessKey"]: r for r in table.to_pylist()}
    assert {k: r["state"] for k, r in got.items()} == {
        "done": "completed", "comp": "compensated", "flight": "running", "retry": "retrying", "stuck": "parked",
        "external": "completed", "queued": "running"}
    assert got["stuck"]["step"] == "payment.StockReserved" and got["stuck"]["reason"] == "card refused"
    assert got["retry"]["reason"] == "boom" and got["done"]["stepsDone"] == 3
    assert got["queued"]["step"] is None and got["queued"]["stepsDone"] == 0
    assert got["done"]["started"] == T0 - dt.timedelta(seconds=1)
    assert table.column("correlationId").to_pylist()[-1] == correlation_id_for("queued")  # newest update first


def test_a_parked_message_processed_after_a_redrive_no_longer_parks_its_instance() -> None:
    inbox = _path("fixed", [("stock", "OrderPlaced", "StockReserved", "done"),
                            ("payment", "StockReserved", "PaymentCharged", "failed"),
                            ("payment", "StockReserved", "PaymentCharged", "done"),
                            ("shipping", "PaymentCharged", None, "done")])
    failed = inbox[1]
    parked = [_parked(failed, "x")]
    (row,) = instance_rows(inbox, STEPS, parked).to_pylist()
    assert row["state"] == "completed" and row["businessKey"] is None and row["messages"] == 3


def test_an_instance_whose_parked_message_was_discarded_is_discarded_with_the_reason() -> None:
    inbox = _path("gone", [("stock", "OrderPlaced", "StockReserved", "done"),
                           ("payment", "StockReserved", None, "failed")])
    failed = inbox[1]
    parked = [_parked(failed, "card refused", state="discarded", discardReason="refunded by hand")]
    (row,) = instance_rows(inbox, STEPS, parked).to_pylist()
    assert (row["state"], row["step"], row["reason"]) == ("discarded", "payment.StockReserved", "refunded by hand")


def test_a_running_instance_says_where_it_waits_now_and_since_when() -> None:
    """Not the last step done: the step whose queue holds its next message (a started one: its first step's)."""
    inbox = [*_path("flight", [("stock", "OrderPlaced", "StockReserved", "done")], minutes=1),
             *_path("paying", [("stock", "OrderPlaced", "StockReserved", "done"),
                               ("payment", "StockReserved", "PaymentCharged", "done")], minutes=2)]
    started = [{"businessKey": k, "correlationId": correlation_id_for(k), "startedAt": T0, "node": "orders",
                "type": "OrderPlaced"} for k in ("flight", "paying", "queued")]
    got = {r["businessKey"]: r for r in instance_rows(inbox, STEPS, [], started).to_pylist()}
    assert {k: (r["state"], r["step"]) for k, r in got.items()} == {
        "flight": ("running", "payment.StockReserved"), "paying": ("running", "shipping.PaymentCharged"),
        "queued": ("running", "stock.OrderPlaced")}
    assert got["flight"]["waitingSince"] == T0 + dt.timedelta(minutes=1)  # when stock sent it on
    assert got["paying"]["waitingSince"] == T0 + dt.timedelta(minutes=2, seconds=1)
    assert got["queued"]["waitingSince"] == T0  # started, its first step has not run
    from safebunny.saga.look.instances import waiting_since

    assert waiting_since(list(got.values())) == {"payment.StockReserved": T0 + dt.timedelta(minutes=1),
                                                 "shipping.PaymentCharged": T0 + dt.timedelta(minutes=2, seconds=1),
                                                 "stock.OrderPlaced": T0}
