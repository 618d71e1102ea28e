"""A saga step's retry and poison copies on a real broker: a replayed batch republishes the same copies
(the same message id and copy id), and the poison listing shows one entry per message."""

from __future__ import annotations

import uuid
from types import SimpleNamespace

import safebunny
from safebunny.exactly_once import FailedRow
from safebunny.exactly_once.claims.batch_claims import BatchClaims
from safebunny.exactly_once.inbox.decisions import parking
from safebunny.exactly_once.inbox.table import Inbox
from safebunny.saga.run.failures import FailureRouter
from safebunny.saga.run.republish import COPY_ID


def _saga(uri, tmp):
    saga = safebunny.Saga(f"sbc-{uuid.uuid4().hex[:8]}", uri=uri, root=str(tmp), settings=safebunny.SagaSettings(
        retry=safebunny.Retry(delays=("1h",))))
    saga.step("stock", consumes="OrderPlaced", from_node="orders", schema="orderId string",
              fails_as="StockFailed")(lambda df, ctx: None)
    saga.step("stock", consumes="StockFailed", from_node="stock", schema="orderId string")(lambda df, ctx: None)
    return saga


def _failed(mid, attempt):
    headers = {"x-safebunny-attempt": str(attempt), "x-causation-id": "cause-1"} if attempt else {}
    return FailedRow(mid, "boom", 1, "corr-1", "ValueError",
                     {"value": b'{"orderId": "o1"}', "headers": headers, "correlationId": "corr-1",
                      "type": "OrderPlaced", "contentType": "application/json"})


def test_a_replayed_batch_republishes_the_same_copies_and_poison_lists_each_message_once(amqp_uri, tmp_path, admin):
    saga = _saga(amqp_uri, tmp_path)
    try:
        saga.declare()
        router = FailureRouter(saga, saga.steps[0])
        ctx = SimpleNamespace(batch_id=7)
        failed = [_failed("m-retry", 0), _failed("m-poison", 1)]
        parks = router.parkings(failed)  # the step's ``parks``: committed, fenced, before anything is sent
        assert set(parks) == {"m-poison"}
        claims = BatchClaims("stock", Inbox(saga.config.layout.inbox, "stock"))
        claims.commit_decisions(None, "E", 7, ["m-poison"], {"m-poison": parking(parks["m-poison"])},
                                {"m-poison": None})
        assert router.parkings(failed) == {}, "parked already: not decided again"
        for _ in range(2):  # the batch, then its replay after a crash before the commit
            routed = router(failed, ctx)
            assert routed == {"retried": 1, "parked": 1}  # what the batch's report counts
        # a copy of the parked message that fails now for a reason the tiers would retry is parked again as committed:
        # the same poison copy id, the same fails_as id (issue 48, item 3)
        assert router([_failed("m-poison", 0)], ctx) == {"retried": 0, "parked": 1}

        tier = admin.get_all(safebunny.topology.retry_queue_name(saga, "stock", "OrderPlaced", 0))
        assert [p.message_id for _, p, _ in tier] == ["m-retry", "m-retry"]
        assert len({p.headers[COPY_ID] for _, p, _ in tier}) == 1
        assert all(p.timestamp and p.headers["x-safebunny-attempt"] == 1 for _, p, _ in tier)

        parked = saga.poison_rows("stock", "OrderPlaced")
        assert [(p.messageId, p.attempts) for p in parked] == [("m-poison", 2)]
        assert parked[0].parkedAt and parked[0].reason == "boom"

        failure = admin.get_all(safebunny.topology.queue_name(saga, "stock", "StockFailed"))
        assert len({p.message_id for _, p, _ in failure}) == 1  # the same derived id: the inbox keeps one
        assert len(failure) == 3  # the batch, its replay, and the later copy parked as recorded
        assert all(p.headers["x-causation-id"] == "m-poison" for _, p, _ in failure)
    finally:
        safebunny.topology.delete(saga)
