"""The demo's input plan and its self-checks (pure): a correct outcome passes, each kind of wrong one fails."""

from __future__ import annotations

import pytest

from safebunny.demo.checks import summarise
from safebunny.demo.orders import plan_orders
from safebunny.ids import correlation_id_for


def _outcome(plan):  # type: ignore[no-untyped-def]
    """The tables a correct run produces."""
    reservations = [{"orderId": o["orderId"], "qty": o["qty"]} for o in plan.orders]
    reservations += [{"orderId": o["orderId"], "qty": -o["qty"]} for o in plan.orders if o["orderId"] in plan.declined]
    payments = [{"orderId": o["orderId"], "status": "declined" if o["orderId"] in plan.declined else "charged"}
                for o in plan.orders]
    shipments = [{"orderId": o["orderId"]} for o in plan.orders if o["orderId"] not in plan.declined]
    poisoned = [correlation_id_for(oid) for oid, _ in plan.malformed]
    return reservations, payments, shipments, poisoned


def test_plan_shares_and_reproducibility() -> None:
    plan = plan_orders(1000, declined_share=0.1, malformed_share=0.02, duplicate_share=0.05)
    assert plan.total == 1000
    assert len(plan.malformed) == 20
    assert len(plan.declined) == pytest.approx(98, abs=3)
    assert len(plan.duplicates) == pytest.approx(49, abs=3)
    assert plan_orders(1000) == plan_orders(1000)
    ids = [o["orderId"] for o in plan.orders] + [oid for oid, _ in plan.malformed]
    assert len(set(ids)) == 1000
    assert all(o["card"].endswith("0002") == (o["orderId"] in plan.declined) for o in plan.orders)


def test_malformed_bodies_do_not_parse() -> None:
    import orjson

    for _, body in plan_orders(200).malformed:
        with pytest.raises(orjson.JSONDecodeError):
            orjson.loads(body)


@pytest.mark.parametrize("n, share", [(0, 0.1), (10, 1.0), (10, -0.1)])
def test_plan_refuses_bad_sizes(n: int, share: float) -> None:
    with pytest.raises(ValueError):
        plan_orders(n, declined_share=share)


def test_a_correct_outcome_passes() -> None:
    plan = plan_orders(300)
    summary = summarise(plan, *_outcome(plan), duplicates_dropped=len(plan.duplicates), left_in_queues={"q": 0})
    assert summary.ok, summary.failures
    c = summary.counts
    assert c["shipped"] + c["compensated"] + c["poisoned"] == c["orders in"] == 300
    assert "checks: all passed" in summary.lines()


def test_each_wrong_outcome_fails() -> None:
    plan = plan_orders(300)
    res, pay, ship, poison = _outcome(plan)
    declined = sorted(plan.declined)[0]
    shipped = ship[0]["orderId"]
    cases = {
        "charged more than once": (res, pay + [{"orderId": shipped, "status": "charged"}], ship, poison),
        "stock still reserved": ([r for r in res if not (r["orderId"] == declined and r["qty"] < 0)]
                                 + [{"orderId": declined, "qty": 0}], pay, ship, poison),
        "shipped twice": (res, pay, ship + [ship[0]], poison),
        "not the 300 orders in": (res, pay, ship[1:], poison),
        "poisoned: missing": (res, pay, ship, poison[1:]),
        "declined orders charged": (res, pay + [{"orderId": declined, "status": "charged"}], ship, poison),
        "stock reserved twice": (res + [res[0]], pay, ship, poison),
    }
    for words, outcome in cases.items():
        summary = summarise(plan, *outcome, duplicates_dropped=len(plan.duplicates), left_in_queues={})
        assert not summary.ok
        assert any(words in f for f in summary.failures), (words, summary.failures)
    left = summarise(plan, *_outcome(plan), duplicates_dropped=len(plan.duplicates), left_in_queues={"q": 3})
    assert any("left after the drain" in f for f in left.failures)
    few = summarise(plan, *_outcome(plan), duplicates_dropped=0, left_in_queues={})
    assert any("duplicates dropped" in f for f in few.failures)


def test_chart_is_a_png(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from safebunny.demo.monitor import write_chart

    path = write_chart(tmp_path / "c" / "chart.png", {"stock.OrderPlaced": [(0.0, 10.0), (1.0, 250.0)]},
                       {"stock.OrderPlaced": [(0.0, 500), (0.5, 250), (1.0, 0)], "payment.StockReserved": []},
                       "demo")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_read_table_reads_delta_and_missing_tables(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import pyarrow as pa
    from deltalake import write_deltalake

    from safebunny.demo.run import read_table

    path = str(tmp_path / "payments")
    assert read_table(path, ["orderId"]) == []
    write_deltalake(path, pa.table({"orderId": ["a", "b"], "status": ["charged", "declined"], "x": [1, 2]}))
    write_deltalake(path, pa.table({"orderId": ["c"], "status": ["charged"], "x": [3]}), mode="append")
    rows = sorted(read_table(path, ["orderId", "status"]), key=lambda r: r["orderId"])
    assert rows == [{"orderId": "a", "status": "charged"}, {"orderId": "b", "status": "declined"},
                    {"orderId": "c", "status": "charged"}]
