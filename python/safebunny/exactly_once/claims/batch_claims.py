"""A batch's claim around its effects, written before the first effect, applied beside the node's other
claims, removed with the inbox marker (:mod:`~safebunny.exactly_once.claims.log` says why).

:class:`BatchClaims` is the protocol's step 4 and the claims' part of step 6 for one step: :meth:`apply_batch`
writes the batch's claim (the ids it applies per target; for a row handler also the ids it decided) and applies
each effect (:class:`~safebunny.exactly_once.claims.takeover.Takeover`), planning again when another batch
commits to a target meanwhile; :meth:`commit_decisions` commits a batch's decisions (a row handler's, and the
parkings of any step) to the fenced decision table before anything else and reads back the ones that landed;
:meth:`release` removes the claim and every orphaned claim whose ids are all done or parked.
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pyarrow as pa

from safebunny.crashpoints import crash_point
from safebunny.delta.backend import table_identity
from safebunny.exactly_once.claims.fence import FenceMoved, StalePlan
from safebunny.exactly_once.claims.log import Claim, ClaimLog, applied_ids
from safebunny.exactly_once.claims.takeover import Takeover
from safebunny.exactly_once.collect.materialize import Materialized, identified
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
#: per node, the lock its batches in this process hold from reading a by-name table's history to their commit there
_NODE_LOCKS: dict[str, threading.Lock] = {}
_NODE_LOCKS_GUARD = threading.Lock()


def _one_at_a_time(node: str) -> threading.Lock:
    """The shards of a step in one driver share each by-name table's lock (Delta's compare-and-set): two of them
    planning at once make one plan again; taking turns here, they never meet (shards in other drivers still can)."""
    with _NODE_LOCKS_GUARD:
        return _NODE_LOCKS.setdefault(node, threading.Lock())


class BatchClaims:
    """The claims of one step's batches (``node``), beside its ``inbox``; the claims and the committed row
    decisions live in the inbox's state location."""

    def __init__(self, node: str, inbox: Inbox) -> None:
        self.node = node
        self.inbox = inbox
        self.claims = ClaimLog(inbox.state, node)
        self.decisions = DecisionTable(inbox.decisions, node)

    def apply_batch(self, spark: Any, epoch: str, batch_id: int, ids: list[str], handled: Materialized,
                    settled: Materialized, rows: bool, decided: Sequence[str] = (), recorded: bool = False) -> Claimed:
        """Claim and apply the batch's settled effects (those with rows); ``handled`` is the handler's outcome
        before settling, ``ids`` the new messages; a batch that committed decisions (a row handler's, and
        ``decided``: more ids it committed there, parkings or a DataFrame step's) claims them even without
        effects, and so does a batch whose DataFrame outcome is ``recorded`` (a later epoch finds their record
        through its claim). Claimed before listing the others, so of two batches on one id at least one sees the
        other's."""
        effects = {key: value for key, value in settled.effects.items() if value[1].num_rows}
        if not effects and not ((rows or decided or recorded) and ids):
            return False, []
        ok = {m for m in ids if m not in settled.failed}
        committed = set(decided) | (ok if rows else set())  # in the decision table already (commit_decisions)
        applied = applied_ids(handled.effects, effects, settled.failed)
        if committed:
            applied[self.decisions.effect.key] = committed
        self.claims.write(epoch, batch_id, sorted(committed | (ok if recorded else set())), applied)
        crash_point("step.after_claim")
        orphans, _ = self.apply(spark, epoch, batch_id, ids, effects)
        return True, orphans

    def commit_decisions(self, spark: Any, epoch: str, batch_id: int, ids: Sequence[str],
                         decisions: Mapping[str, Any], rounds: Mapping[str, str | None],
                         parks: bool = True) -> dict[str, Any]:
        """Claim and commit ``decisions`` (id -> decision, of some of ``ids``) to the decision table, fenced, and
        return the committed decision of each of ``ids`` that has one (this batch's, or another's that landed
        first). Where the step parks (``parks``), the table itself is read after the listing besides the inbox: a
        batch that committed a parking and finished since (its claim removed) marked the id failed, not done, so
        the inbox alone would not leave it out."""
        table, mine = self.decisions, [m for m in ids if m in decisions]
        met = True
        if mine:
            crash_point("step.before_decisions")
            self.claims.write(epoch, batch_id, mine, {table.effect.key: mine})
            rows = table.rows(decisions, mine, epoch, batch_id)
            met = self.apply(spark, epoch, batch_id, ids, {table.effect.key: (table.effect, rows)},
                             late=(lambda: set(table.read(mine, rounds))) if parks else None)[1]
        if not met:  # nobody else decided these: what landed is this batch's
            return {mid: decisions[mid] for mid in mine}
        return table.read(ids, rounds)

    def apply(self, spark: Any, epoch: str, batch_id: int, ids: Sequence[str],
              effects: Mapping[tuple, tuple[Effect, pa.Table]],
              late: Callable[[], set[str]] | None = None) -> tuple[list[Claim], bool]:
        """Apply ``effects`` beside the node's other claims (:mod:`~safebunny.exactly_once.claims.takeover`); when
        another batch commits to a target meanwhile, plan again from what landed. Returns the other claims,
        and whether another batch was met (:meth:`Takeover.apply`). ``late``: more ids to leave out, read after
        each listing (beside the inbox's done ids)."""
        takeover = Takeover(spark, self.node, epoch, batch_id)
        # named by identity (a no-op for the handler's effects, named so already): the decision table's too
        effects = identified(Materialized(effects=dict(effects)), lambda table: table_identity(table, spark)).effects
        pins: dict[tuple, int | None] = {}  # per target: a version read before the listing a fenced plan uses
        moved, pinned = 0, False
        locked = takeover.locked(effects)  # a table by name: this node's batches here take turns on it
        while True:
            try:
                with _one_at_a_time(self.node) if locked else contextlib.nullcontext():
                    histories = takeover.histories(locked)  # tables by name: their lock, read before the listing
                    orphans = self._orphans(epoch, batch_id)
                    met = takeover.apply(effects, orphans, lambda: self.inbox.seen(ids, epoch, batch_id) | (
                        late() if late is not None else set()), pins, histories)
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

    def release(self, epoch: str, batch_id: int, claimed: Claimed, parked: Sequence[str] = ()) -> list[Claim]:
        """After the batch's inbox marker: remove its claim, and each orphaned one whose ids are all done or
        ``parked`` (ids this batch parked, as committed); those are returned (nothing reads their batches' records
        any more)."""
        wrote, orphans = claimed
        if wrote:
            self.claims.remove(epoch, batch_id)
        left = set(parked)
        retired = [claim for claim in orphans
                   if len(self.inbox.seen(sorted(claim.ids - left), "", -1)) == len(claim.ids - left)]
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
