"""A row handler run on a batch, each message decided once and its decision committed before anything else.

``handler(message, ctx)`` is called per message; a message whose call raises is retried in place
(``row_retries``), then failed with its reason (docs/exactly-once.md, "Row handlers"). The decisions go to
the batch's outcome log first, an orphaned batch's decision is kept, and the successful ones are committed
to the fenced decision table (:mod:`~safebunny.exactly_once.inbox.decisions`), whose landed decisions win, so
an instance never takes two branches; so are the failures the step parks for good (``StepSettings(parks=...)``),
in the same commit: a message ends applied or parked, never both.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import pyarrow as pa

from safebunny.crashpoints import crash_point
from safebunny.delta.backend import delta_target
from safebunny.errors import SafeBunnyOptionError
from safebunny.exactly_once.claims.batch_claims import BatchClaims
from safebunny.exactly_once.collect.batch import NewMessages
from safebunny.exactly_once.collect.materialize import Materialized, check_outcome
from safebunny.exactly_once.handlers.frame_handler import describe
from safebunny.exactly_once.handlers.row_types import build_tables, type_decisions
from safebunny.exactly_once.inbox.decisions import OutcomeLog, parking, rounds_of
from safebunny.exactly_once.outcome import FailedRow, Outcome, StepContext

__all__ = ["RowRun", "from_rows", "Parks"]

#: commits decisions (id -> decision) fenced, given each message's round; the committed ones of the batch's ids
CommitFenced = Callable[[Mapping[str, Any], Mapping[str, "str | None"]], dict[str, Any]]
#: (failed rows, with their input rows) -> the parking record of each the step parks for good, not parked before
#: (``StepSettings(parks=...)``: ``reason``, ``error_type``, ``attempt``, ``redriven``)
Parks = Callable[[list[FailedRow]], Mapping[str, Mapping[str, Any]]]


class RowRun:
    """Runs a row handler over a batch's new messages for one step."""

    def __init__(self, claimed: BatchClaims, row_retries: int) -> None:
        self.inbox = claimed.inbox
        self.claimed = claimed  # its claims and decision table
        self.outcomes = OutcomeLog(self.inbox.state, claimed.node)  # beside the claims
        self.row_retries = row_retries

    def run(self, new: NewMessages, handler: Callable[[dict[str, Any], StepContext], Any], ctx: StepContext,
            replayed: bool, commit: CommitFenced, parks: Parks | None = None,
            rejected: Mapping[str, FailedRow] | None = None) -> tuple[Materialized, list[str]]:
        """The batch's outcome from the decisions: recorded ones on a replay, else made now and committed (with
        the parkings ``parks`` makes of the failed ones and of ``rejected``, the messages kept from the handler);
        and the ids parked as committed."""
        if not new.count:
            return Materialized(), []
        decisions = self.outcomes.read(ctx.epoch, ctx.batch_id)
        if decisions is None:
            decisions = self._orphan_decisions(ctx, new.ids)
            for row in new.table.to_pylist():
                mid = row["messageId"]
                if mid not in decisions:
                    decisions[mid] = self._decide(handler, row, ctx)
            crash_point("step.in_handler")
            decisions = type_decisions(decisions, _target_schema)
            self.outcomes.write(ctx.epoch, ctx.batch_id, decisions)
        if not replayed:  # commit the decisions; where another batch's landed first, take those instead
            adopted = self._commit(new, decisions, commit, parks, rejected or {})
            if adopted:
                decisions = type_decisions({**decisions, **adopted}, _target_schema)
                self.outcomes.write(ctx.epoch, ctx.batch_id, decisions)
        parked = [mid for mid, decision in decisions.items() if decision.get("parked")]
        return build_tables(decisions, _target_schema, new.correlation_of()), parked

    def _commit(self, new: NewMessages, decisions: Mapping[str, Any], commit: CommitFenced, parks: Parks | None,
                rejected: Mapping[str, FailedRow]) -> dict[str, Any]:
        """Commit the batch's successful decisions and its parkings, fenced; the committed decisions that differ
        from this batch's (another batch's landed first, or this is a replay)."""
        mine = {mid: decisions[mid] for mid in new.ids if decisions.get(mid, {}).get("ok")}
        if parks is not None:
            correlations = new.correlation_of()
            failed = [FailedRow(mid, d["reason"], d.get("attempts", 1), correlations.get(mid), d.get("error_type"),
                                new.row_of(mid)) for mid, d in decisions.items() if not d["ok"] and mid in new.order]
            for mid, record in parks([*failed, *rejected.values()]).items():
                mine[mid] = parking(record)
        committed = commit(mine, rounds_of(new.table))
        return {mid: decision for mid, decision in committed.items() if decision != decisions.get(mid)}

    def _orphan_decisions(self, ctx: StepContext, ids: list[str]) -> dict[str, Any]:
        """What an orphaned batch of another epoch decided for any of ``ids``: its effects may be applied and
        its emits published already, so its decisions stand (a handler calling a service may answer
        differently now). A failed decision is never reused: it applied and sent nothing, so the message is
        decided again (the service may be back)."""
        wanted, out = set(ids), {}
        for claim in self.claimed.claims.others(ctx.epoch, ctx.batch_id):
            if not claim.ids & wanted or self.inbox.batch_done(claim.epoch, claim.batch_id):
                continue
            recorded = self.outcomes.read(claim.epoch, claim.batch_id) or {}
            out.update({mid: recorded[mid] for mid in claim.ids & wanted
                        if mid in recorded and recorded[mid].get("ok", True)})
        return out

    def _decide(self, handler: Callable[[dict[str, Any], StepContext], Any], row: dict[str, Any],
                ctx: StepContext) -> dict[str, Any]:
        attempts = self.row_retries + 1
        ctx = replace(ctx, message_id=row["messageId"], correlation_id=row.get("correlationId"))
        for attempt in range(1, attempts + 1):
            try:
                return from_rows(row["messageId"], handler(row, replace(ctx, attempt=attempt)))
            except SafeBunnyOptionError:
                raise
            except Exception as exc:  # noqa: BLE001 - a failing row is retried, then failed with its reason
                error_type, reason = describe(exc)
                if attempt < attempts:
                    time.sleep(min(0.05 * 2 ** attempt, 1.0))
        return {"ok": False, "reason": reason, "error_type": error_type, "attempts": attempts}


def _target_schema(table: str) -> pa.Schema | None:
    """An effect target's schema where it is read (a path that exists); else the batch's rows decide the types."""
    return delta_target(table, what="The effect table").schema()


def from_rows(message_id: str, outcome: Outcome | None) -> dict[str, Any]:
    """A row handler's outcome as a JSON-able decision (what the outcome log records)."""
    decision: dict[str, Any] = {"ok": True, "effects": [], "emits": []}
    if not check_outcome(outcome, "row"):
        return decision
    for failed in outcome.failed:  # the handler rejected its message: no effect, no emit
        if failed.message_id == message_id:
            return {"ok": False, "reason": failed.reason, "error_type": failed.error_type,
                    "attempts": failed.attempts}
    for effect in outcome.effects:
        decision["effects"].append({"kind": effect.kind, "table": effect.table, "on": list(effect.on),
                                    "rows": _rows(effect.data, message_id)})
    for item in outcome.emits:
        decision["emits"].append({"type": item.type, "exchange": item.exchange, "routing_key": item.routing_key,
                                  "rows": _rows(item.data, message_id)})
    return decision


def _rows(data: Any, message_id: str) -> list[dict[str, Any]]:
    items = [data] if isinstance(data, dict) else list(data or [])
    for item in items:
        if not isinstance(item, dict):
            raise SafeBunnyOptionError(
                f"In a row handler, effects and emits take dicts (or lists of dicts); got {type(item).__name__}.",
                "handler")
    return [{"messageId": message_id, **item} for item in items]
