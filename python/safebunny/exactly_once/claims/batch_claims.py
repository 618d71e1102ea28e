"""A batch's claim around its effects, written before the first effect, applied beside the node's other
claims, removed with the inbox marker (:mod:`~safebunny.exactly_once.claims.log` says why).

:class:`BatchClaims` is the protocol's step 4 and the claims' part of step 6 for one step: :meth:`apply_batch`
writes the batch's claim (the ids it applies per target; for a row handler also the ids it decided) and applies
each effect (:class:`~safebunny.exactly_once.claims.takeover.Takeover`), planning again when another batch
commits to a target meanwhile; :meth:`release` removes the claim and every orphaned claim whose ids are all done.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from safebunny.crashpoints import crash_point
from safebunny.exactly_once.claims.fence import FenceMoved, StalePlan
from safebunny.exactly_once.claims.log import Claim, ClaimLog, applied_ids
from safebunny.exactly_once.claims.takeover import Takeover
from safebunny.exactly_once.collect.materialize import Materialized
from safebunny.exactly_once.inbox.decisions import DecisionTable
from safebunny.exactly_once.inbox.table import Inbox
from safebunny.exactly_once.outcome import Effect

__all__ = ["BatchClaims", "Claimed"]

log = logging.getLogger("safebunny.step")
#: plans of a batch's effects before it fails (another batch committing to its targets each time; the shards of a
#: step share a table's lock by name, so they meet there in the normal course)
_FENCE_ATTEMPTS = 8
#: what :meth:`BatchClaims.apply_batch` leaves for :meth:`BatchClaims.release`: whether the batch wrote a claim,
#: and the other claims it met
Claimed = tuple[bool, list[Claim]]


class BatchClaims:
    """The claims of one step's batches (``node``), beside its ``inbox``; the claims and the committed row
    decisions live in the inbox's state location."""

    def __init__(self, node: str, inbox: Inbox) -> None:
        self.node = node
        self.inbox = inbox
        self.claims = ClaimLog(inbox.state, node)
        self.decisions = DecisionTable(inbox.state, node)

    def apply_batch(self, spark: Any, epoch: str, batch_id: int, ids: list[str], handled: Materialized,
                    settled: Materialized, rows: bool, recorded: bool = False) -> Claimed:
        """Claim and apply the batch's settled effects (those with rows); ``handled`` is the handler's outcome
        before settling, ``ids`` the new messages; a row handler's batch, and a batch whose DataFrame outcome is
        ``recorded``, claims its decided ids even without effects (a later epoch finds their record through it).
        Claimed before listing the others, so of two batches on one id at least one sees the other's."""
        effects = {key: value for key, value in settled.effects.items() if value[1].num_rows}
        if not effects and not ((rows or recorded) and ids):
            return False, []
        decided = [m for m in ids if m not in settled.failed] if rows or recorded else []
        applied = applied_ids(handled.effects, effects, settled.failed)
        if rows and decided:  # the decision table's part, committed already (RowRun)
            applied[self.decisions.effect.key] = set(decided)
        self.claims.write(epoch, batch_id, decided, applied)
        crash_point("step.after_claim")
        orphans, _ = self.apply(spark, epoch, batch_id, ids, effects)
        return True, orphans

    def apply(self, spark: Any, epoch: str, batch_id: int, ids: Sequence[str],
              effects: Mapping[tuple, tuple[Effect, pa.Table]]) -> tuple[list[Claim], bool]:
        """Apply ``effects`` beside the node's other claims (:mod:`~safebunny.exactly_once.claims.takeover`); when
        another batch commits to a target meanwhile, plan again from what landed. Returns the other claims,
        and whether another batch was met (:meth:`Takeover.apply`)."""
        takeover = Takeover(spark, self.node, epoch, batch_id)
        pins: dict[tuple, int | None] = {}  # per target: a version read before the listing a fenced plan uses
        moved, pinned = 0, False
        while True:
            try:
                histories = takeover.histories(effects)  # tables by name: their lock, read before the listing
                orphans = self._orphans(epoch, batch_id)
                met = takeover.apply(effects, orphans, lambda: self.inbox.seen(ids, epoch, batch_id), pins, histories)
                return orphans, met
            except FenceMoved as exc:
                if isinstance(exc, StalePlan) and not pinned:  # fenced before this listing: list again, once
                    pinned = True
                    continue
                moved += 1
                if moved == _FENCE_ATTEMPTS:
                    raise
                pins.clear()  # a pin the table moved past is read again, before the next listing
                pinned = False
                time.sleep(random.uniform(0, 0.1 * moved))  # two batches that met once do not meet in step again
                log.warning("step %s batch %d: another batch committed to a target this one planned against; "
                            "planning again (%d/%d)", self.node, batch_id, moved, _FENCE_ATTEMPTS)

    def release(self, epoch: str, batch_id: int, claimed: Claimed) -> list[Claim]:
        """After the batch's inbox marker: remove its claim, and each orphaned one whose ids are all done (those
        are returned: nothing reads their batches' records any more)."""
        wrote, orphans = claimed
        if wrote:
            self.claims.remove(epoch, batch_id)
        retired = [claim for claim in orphans if len(self.inbox.seen(sorted(claim.ids), "", -1)) == len(claim.ids)]
        for claim in retired:
            self.claims.remove(claim.epoch, claim.batch_id)
        return retired

    def _orphans(self, epoch: str, batch_id: int) -> list[Claim]:
        """The node's other claims whose batch never wrote its marker (stale ones removed), however old."""
        orphans = []
        for claim in self.claims.others(epoch, batch_id):
            if self.inbox.batch_done(claim.epoch, claim.batch_id):
                self.claims.remove(claim.epoch, claim.batch_id)
            else:  # kept until its ids are done: they may still be queued (a paused step, a long outage)
                orphans.append(claim)
        return orphans
