"""Where a saga step's failed rows go, the next retry tier or the poison queue (and, if the step asks
for it, a failure message that compensation steps consume). Published with confirms and
``mandatory`` before the batch commits, so a failed row is never dropped; a replayed batch republishes
the same copies (:mod:`safebunny.saga.run.republish`). A parking is decided by :meth:`FailureRouter.parkings` (the
step's ``parks``) and committed to the step's fenced decision table before any effect or copy, then honoured by
every later attempt, in any epoch (:mod:`safebunny.saga.run.parked_ids`): a message parked once is parked again with
the same copies, never applied. It returns how many rows it retried and parked: the batch's report
keeps them (:mod:`safebunny.saga.run.reports`)."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from safebunny.amqp.message_rows import as_text
from safebunny.amqp.outgoing import CAUSATION_HEADER
from safebunny.crashpoints import crash_point
from safebunny.exactly_once import FailedRow
from safebunny.ids import message_id
from safebunny.saga.define import topology
from safebunny.saga.define.config import SagaConfig, SagaShape
from safebunny.saga.define.definition import SagaStep
from safebunny.saga.define.retry import REASON, Decision, decide, failure_headers
from safebunny.saga.run.parked_ids import REDRIVEN, ParkedIds
from safebunny.saga.run.republish import COPY_ID, Copy, copy_id, publish_copies

__all__ = ["FailureRouter"]

log = logging.getLogger("safebunny.saga")


class FailureRouter:
    """The ``on_failed`` callback of one saga step (or shard): where each failed row goes."""

    def __init__(self, saga: SagaShape, step: SagaStep) -> None:
        self.saga = saga
        self.step = step
        layout = saga.config.layout
        self.parked_ids = ParkedIds(layout.parked_ids(step.unit_label), layout.inbox, step.node)

    @property
    def config(self) -> SagaConfig:
        """The saga's settings as they are now (the command line may point a loaded saga at another broker)."""
        return self.saga.config

    def parkings(self, failed: list[FailedRow]) -> dict[str, dict[str, Any]]:
        """The step's ``parks``: the parking record of each of ``failed`` that goes to poison now and has none (the
        step commits them, fenced, before anything is applied or sent)."""
        recorded = self.parked_ids.parkings({row.message_id: _round(row) for row in failed})
        out = {}
        for row in failed:
            headers = dict((row.row or {}).get("headers") or {})
            decision = decide(self.config.settings.retry, headers, row.error_type)
            if row.message_id not in recorded and decision.target == "poison":
                out[row.message_id] = {"error_type": row.error_type, "reason": row.reason[:2000],
                                       "attempt": decision.attempt, "redriven": as_text(headers.get(REDRIVEN))}
        return out

    def __call__(self, failed: list[FailedRow], ctx: Any) -> Counter[str]:
        """Publish the copies of ``failed`` (confirmed), each parked one as its committed parking says; how many
        were retried and parked."""
        batch: Counter[tuple[str, str]] = Counter()
        example: dict[tuple[str, str], tuple[str, str]] = {}
        copies: list[Copy] = []
        parked: set[str] = set()
        honoured = self.parked_ids.parkings({row.message_id: _round(row) for row in failed}) if failed else {}
        for row in failed:
            source: Mapping[str, Any] = row.row or {}
            headers = dict(source.get("headers") or {})
            recorded = honoured.get(row.message_id)
            if recorded is None:  # not parked: decided now (a retry tier; poison only where nothing was committed)
                decision = decide(self.config.settings.retry, headers, row.error_type)
            else:  # parked before (a replay, another epoch): the same decision, the same copies and ids
                decision = Decision("poison", None, int(recorded.get("attempt") or 1))
                row = replace(row, reason=recorded.get("reason") or row.reason,
                              error_type=recorded.get("error_type") or row.error_type)
            poisoned = decision.target == "poison"
            if poisoned:
                target = topology.poison_queue_name(self.config, self.step.node, self.step.consumes)
            else:
                target = topology.retry_queue_name(self.config, self.step.node, self.step.consumes, decision.tier,
                                                   self.step.shard)
            out = failure_headers(headers, step=self.step.label, error_type=row.error_type, reason=row.reason,
                                  attempt=decision.attempt, poisoned=poisoned)
            out[COPY_ID] = copy_id(row.message_id, target, decision.attempt)
            body = _bytes(source.get("value"))
            copies.append(Copy(row.message_id, body, "", target, source.get("correlationId") or row.correlation_id,
                               source.get("type"), source.get("contentType"), out))
            if poisoned and self.step.fails_as:
                copies.append(self._failure_message(row, source, body))
            if poisoned:
                parked.add(row.message_id)
            key = ("poisoned" if poisoned else f"sent to retry tier {decision.tier}", row.error_type or "error")
            batch[key] += 1
            example.setdefault(key, (row.message_id, row.reason[:300]))
            log.info("saga %s step %s: message %s %s (attempt %d): %s", self.config.name, self.step.label,
                     row.message_id, "poisoned" if poisoned else f"to retry tier {decision.tier}",
                     decision.attempt, row.reason[:300])
        # the parkings were committed before anything was applied or sent (parkings, the step's ``parks``): once a
        # poison copy or a fails_as message may be out, every later attempt parks the message the same way
        crash_point("saga.after_parked_ids")
        publish_copies(self.config.connection.login_uri, copies, f"saga:{self.step.unit_label}/{ctx.batch_id}",
                       self.config.connection_name("failures", self.step.unit_label))
        crash_point("saga.after_failure_copies")
        # one warning per outcome and reason in a batch, not one per message (each message's line is at INFO)
        for (what, error_type), count in batch.items():
            mid, reason = example[(what, error_type)]
            log.warning("saga %s step %s batch %d: %d message(s) %s (%s), e.g. %s: %s", self.config.name,
                        self.step.label, ctx.batch_id, count, what, error_type, mid, reason)
        return Counter(retried=len(failed) - len(parked), parked=len(parked))  # each row went one of the two ways

    def _failure_message(self, row: FailedRow, source: Mapping[str, Any], body: bytes) -> Copy:
        """The ``fails_as`` message of a poisoned row: an output of it, with an id derived as emits' are."""
        failure_type = self.step.fails_as or ""
        correlation = source.get("correlationId") or row.correlation_id
        return Copy(message_id(row.message_id, self.step.node, failure_type, 0), body,
                    topology.exchange_name(self.config),
                    topology.message_routing_key(self.saga, self.step.node, failure_type, correlation), correlation,
                    failure_type,
                    source.get("contentType") or "application/json",
                    {CAUSATION_HEADER: row.message_id, REASON: row.reason[:2000]})


def _round(row: FailedRow) -> str | None:
    """The redrive stamp of a failed row's copy (a parking covers the copies of its own stamp)."""
    return as_text(dict((row.row or {}).get("headers") or {}).get(REDRIVEN))


def _bytes(value: Any) -> bytes:
    if value is None:
        return b""
    return value.encode("utf-8") if isinstance(value, str) else bytes(value)
