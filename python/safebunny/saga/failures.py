"""Where a saga step's failed rows go: the next retry tier, or the poison queue (and, if the step asks
for it, a failure message that compensation steps consume). Published with confirms and
``mandatory`` before the batch commits, so a failed row is never dropped."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping
from typing import Any

from safebunny.amqp import topology
from safebunny.amqp.connection import open_blocking
from safebunny.exactly_once import FailedRow
from safebunny.ids import message_id
from safebunny.saga.definition import SagaStep
from safebunny.saga.retry import decide, failure_headers

__all__ = ["FailureRouter"]

log = logging.getLogger("safebunny.saga")


class FailureRouter:
    """The ``on_failed`` callback of one saga step; counts what it retried and poisoned."""

    def __init__(self, saga: Any, step: SagaStep) -> None:
        self.saga = saga
        self.step = step
        self.counts: Counter[str] = Counter()

    def __call__(self, failed: list[FailedRow], ctx: Any) -> None:
        import pika

        batch: Counter[tuple[str, str]] = Counter()
        example: dict[tuple[str, str], tuple[str, str]] = {}
        conn = open_blocking(self.saga.connection_uri, action=f"route failed messages of step {self.step.label}")
        try:
            ch = conn.channel()
            ch.confirm_delivery()
            for row in failed:
                source: Mapping[str, Any] = row.row or {}
                headers = dict(source.get("headers") or {})
                decision = decide(self.saga.retry, headers, row.error_type)
                poisoned = decision.target == "poison"
                props = pika.BasicProperties(
                    message_id=row.message_id, correlation_id=source.get("correlationId") or row.correlation_id,
                    type=source.get("type"), content_type=source.get("contentType"), delivery_mode=2,
                    headers=failure_headers(headers, step=self.step.label, error_type=row.error_type,
                                            reason=row.reason, attempt=decision.attempt, poisoned=poisoned))
                body = source.get("value") or b""
                if poisoned:
                    target = topology.poison_queue_name(self.saga, self.step.node, self.step.consumes)
                else:
                    target = topology.retry_queue_name(self.saga, self.step.node, self.step.consumes, decision.tier)
                ch.basic_publish("", target, body, props, mandatory=True)
                self.counts["poisoned" if poisoned else "retried"] += 1
                if poisoned and self.step.fails_as:
                    self._publish_failure(ch, row, source, body)
                key = ("poisoned" if poisoned else f"sent to retry tier {decision.tier}", row.error_type or "error")
                batch[key] += 1
                example.setdefault(key, (row.message_id, row.reason[:300]))
                log.info("saga %s step %s: message %s %s (attempt %d): %s", self.saga.name, self.step.label,
                         row.message_id, "poisoned" if poisoned else f"to retry tier {decision.tier}",
                         decision.attempt, row.reason[:300])
        finally:
            conn.close()
        # one warning per outcome and reason in a batch, not one per message (each message's line is at INFO)
        for (what, error_type), count in batch.items():
            mid, reason = example[(what, error_type)]
            log.warning("saga %s step %s batch %d: %d message(s) %s (%s), e.g. %s: %s", self.saga.name,
                        self.step.label, ctx.batch_id, count, what, error_type, mid, reason)

    def _publish_failure(self, ch: Any, row: FailedRow, source: Mapping[str, Any], body: bytes) -> None:
        import pika

        failure_type = self.step.fails_as or ""
        props = pika.BasicProperties(
            message_id=message_id(row.message_id, self.step.node, failure_type, 0),
            correlation_id=source.get("correlationId") or row.correlation_id, type=failure_type,
            content_type=source.get("contentType") or "application/json", delivery_mode=2,
            headers={"x-causation-id": row.message_id, "x-safebunny-reason": row.reason[:2000]})
        ch.basic_publish(topology.exchange_name(self.saga), topology.routing_key(self.step.node, failure_type),
                         body, props, mandatory=True)
