"""What a ``fails_as`` message carries (docs/sagas.md, "Compensation"): the saga's failure router, on the real
broker, parks a poisoned message and publishes one failure message that a compensation step's queue receives."""

from __future__ import annotations

from types import SimpleNamespace

import safebunny
from safebunny.exactly_once import FailedRow
from safebunny.saga.run.failures import FailureRouter


def test_a_poisoned_message_publishes_its_fails_as_message(amqp_uri, admin, unique_name, tmp_path):
    saga = safebunny.Saga(unique_name, uri=amqp_uri, root=str(tmp_path), settings=safebunny.SagaSettings(
        retry=safebunny.Retry(delays=("1s",))))

    @saga.step("payment", consumes="StockReserved", from_node="stock", schema="orderId string",
               fails_as="PaymentFailed")
    def charge(items, ctx):
        return None

    @saga.step("stock", consumes="PaymentFailed", from_node="payment", schema="orderId string",
               compensates="OrderPlaced")
    def release(failed, ctx):
        return None

    saga.declare()
    try:
        step = saga.step_of("payment", "StockReserved")
        body = b'{"orderId": "o-1"}'
        row = {"value": body, "correlationId": "corr-1", "type": "StockReserved", "contentType": "application/json",
               "headers": {"x-safebunny-attempt": 1, "app-header": "kept on the parked copy"}}
        FailureRouter(saga, step)([FailedRow("m-1", "ValueError: card expired", 1, "corr-1", "ValueError", row)],
                                  SimpleNamespace(batch_id=7))

        parked = saga.poison_rows("payment", "StockReserved")
        assert [p.messageId for p in parked] == ["m-1"]
        (_, props, got), = admin.get_all(f"{unique_name}.stock.PaymentFailed")
        assert got == body
        assert props.type == "PaymentFailed"
        assert props.message_id == safebunny.message_id("m-1", "payment", "PaymentFailed", 0)
        assert props.correlation_id == "corr-1" and props.content_type == "application/json"
        headers = {k: v for k, v in props.headers.items() if k != "x-delivery-count"}  # the quorum queue's own
        assert headers == {"x-causation-id": "m-1", "x-safebunny-reason": "ValueError: card expired"}
    finally:
        safebunny.topology.delete(saga)
