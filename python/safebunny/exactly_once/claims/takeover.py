"""Applying a batch's Delta effects beside other claims on its ids: leave out, fence, or apply.

The batch's own claim is written first; then the other claims are listed and, per target,
:func:`~safebunny.exactly_once.claims.fence.plan_target` decides which ids another batch applied there (left
out) and which claims this commit fences; the inbox is asked again for ids marked done meanwhile. Each effect
is one commit carrying its app transaction and its fences, refused when anything it planned against moved
(:class:`~safebunny.exactly_once.claims.fence.FenceMoved`). Why this is enough: docs/exactly-once.md ("The
fence: two batches on the same messages").

Each target is resolved once per batch (:func:`~safebunny.delta.backend.delta_target`: a path on delta-rs,
fenceable; a name on Spark Delta, read through its history) and written through it. A table by name is fenced by
its lock instead (:func:`lock_app_id`): its history is read before the claims are listed (:meth:`Takeover.histories`),
the plan rests on it, and the commit carries the lock at the version after the one read there; a commit that does
not land raises :class:`~safebunny.exactly_once.claims.fence.FenceMoved` (docs/exactly-once.md, "The fence for
tables by name").
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import pyarrow as pa

from safebunny.crashpoints import crash_point
from safebunny.delta.backend import delta_target, table_identity
from safebunny.delta.target import DeltaTarget, Guard
from safebunny.exactly_once.claims.fence import (
    SCHEME,
    FenceMoved,
    Orphan,
    StalePlan,
    TargetPlan,
    apply_version,
    check_expected,
    plan_target,
)
from safebunny.exactly_once.claims.log import Claim
from safebunny.exactly_once.collect.materialize import without_messages
from safebunny.exactly_once.outcome import Effect

__all__: list[str] = []

log = logging.getLogger("safebunny.step")


@dataclass(frozen=True)
class Takeover:
    """One batch's effects against the other claims of its node."""

    spark: Any
    node: str
    epoch: str
    batch_id: int
    identities: dict[str, str] = field(default_factory=dict)
    targets: dict[tuple, DeltaTarget] = field(default_factory=dict)

    def target(self, key: tuple, effect: Effect) -> DeltaTarget:
        """The target of ``effect`` (keyed ``key``), resolved once per batch."""
        if key not in self.targets:
            self.targets[key] = delta_target(effect.table, self.spark, what="The effect table", checked=True)
        return self.targets[key]

    def locked(self, effects: Mapping[tuple, tuple[Effect, pa.Table]]) -> dict[tuple, DeltaTarget]:
        """The targets of ``effects`` fenced by their lock (tables by name: :meth:`histories` reads them), by key;
        empty when every one is fenceable."""
        targets = {key: self.target(key, effect) for key, (effect, _table) in effects.items()}
        return {key: target for key, target in targets.items() if not target.fenceable}

    @staticmethod
    def histories(locked: Mapping[tuple, DeltaTarget]) -> dict[tuple, Any]:
        """Per target given by name (:meth:`locked`), its history, read before the claims are listed: the lock's
        version there is what the commit compares against, so any commit of this node landing after this read
        refuses it."""
        return {key: target.history() for key, target in locked.items()}

    def apply(self, effects: Mapping[tuple, tuple[Effect, pa.Table]], orphans: Sequence[Claim],
              late_done: Callable[[], set[str]], pins: dict[tuple, int | None],
              histories: Mapping[tuple, Any]) -> bool:
        """Apply ``effects`` (settled, keyed by target) exactly once beside ``orphans`` (listed after this
        batch's claim was written); ``late_done()`` gives the batch's ids done in the inbox by now: a batch that
        finished and removed its claim since this one's dedupe is in no listing, but its marker is in. True when
        another batch was met: it applied some of these ids, or this batch's own commit was in already.

        ``pins``: per target, a table version read before ``orphans`` were listed. A target this batch was fenced
        out of is planned only with one; without it the target is left for the next pass, its version read now
        (after this listing, so before the next), and :class:`StalePlan` raised once the others are applied.

        ``histories``: per target given by name, its history read before ``orphans`` were listed
        (:meth:`histories`); such a target is planned from it and its commit carries the lock."""
        late: set[str] | None = None
        met = stale = False
        for key in sorted(effects, key=repr):
            effect, table = effects[key]
            target = self.target(key, effect)
            history = histories.get(key)  # only tables by name have one
            plan = self._plan(effect, target, table, orphans, pins.get(key), history)
            met = met or plan.done or bool(plan.leave_out)
            if plan.stale:  # fenced after this batch listed the claims: the fencer may be in no listing yet
                pins[key] = target.table_version()
                stale = met = True
                continue
            if plan.done:
                continue
            if late is None:  # after the claims were listed: a batch that finished since this one's dedupe
                late = late_done()
            skip = plan.leave_out | late
            rows = without_messages(table, skip)
            met = met or rows.num_rows < table.num_rows
            if skip:
                log.warning("step %s batch %d: %d message(s) of %s were applied by another batch (a crash, then a "
                            "new checkpoint, or another driver holding them); their rows are left out", self.node,
                            self.batch_id, table.num_rows - rows.num_rows, effect.table)
            if plan.fences:
                log.warning("step %s batch %d: fencing %d other batch(es) out of %s (they claimed messages this "
                            "batch applies)", self.node, self.batch_id, len(plan.fences), effect.table)
            guard = partial(check_expected, plan, effect.table) if plan.expect else None
            app = effect_app_id(self.node, self.epoch, effect)
            fences = plan.fences if target.fenceable else self._lock(target, effect, history)
            crash_point("step.before_one_effect")  # planned, the inbox read again: only the commit is left
            if not apply_effect(target, effect, rows, app, apply_version(self.batch_id), fences, guard) \
                    and not target.fenceable and rows.num_rows:
                raise FenceMoved(
                    f"Another batch of step {self.node} committed to the effect table {effect.table!r} after this one "
                    f"read its history (its lock {fences[0][0]!r} is past {fences[0][1] - 1}): two drivers hold the "
                    "same messages, or a batch replays beside a standby. This batch plans again from what landed; "
                    "nothing is applied twice.")
            crash_point("step.after_one_effect")
        if stale:
            raise StalePlan(f"step {self.node} batch {self.batch_id} was fenced out of an effect table after it "
                            "listed the claims: it lists them again and plans that table from what it finds")
        return met

    def _identity(self, table: str) -> str:
        """A claimed target's table as the catalog resolves it now (:func:`table_identity`), once per batch."""
        if table not in self.identities:
            self.identities[table] = table_identity(table, self.spark)
        return self.identities[table]

    def _lock(self, target: DeltaTarget, effect: Effect, history: Any) -> tuple[tuple[str, int], ...]:
        """The lock a commit to a table by name carries: its version read in ``history``, plus one."""
        lock = lock_app_id(self.node, effect)
        return ((lock, (target.lock_in(history, lock) or 0) + 1),)

    def _plan(self, effect: Effect, target: DeltaTarget, table: pa.Table, orphans: Sequence[Claim],
              pinned: int | None, history: Any = None) -> TargetPlan:
        """The plan for one target, from one read of its app transactions: this batch's own, the legacy one of
        its epoch (a batch written before fences came) and each orphan's that applied ids there; for a table by
        name, from ``history`` (read before the listing)."""
        own = effect_app_id(self.node, self.epoch, effect)
        fenceable = target.fenceable
        legacy = effect_app_id(self.node, self.epoch, effect, 1)
        # a claim keys a target as its batch named it: an app id hashes that name, the match is by identity
        claimed = [(claim, ids, target_app_id(self.node, claim.epoch, key, claim.scheme))
                   for claim in orphans for key, ids in claim.applied.items()
                   if ids and key[0] == effect.kind and key[2] == effect.on and self._identity(key[1]) == effect.table]
        # a commit by name carries the lock, not its own app transaction: its own replay is read from the tags too
        apps = {own: apply_version(self.batch_id), legacy: self.batch_id}
        apps.update({app: apply_version(claim.batch_id, claim.scheme) for claim, _, app in claimed})
        since = {app: claim.written_at for claim, _, app in claimed}  # a claim is written before its batch's effects
        versions = target.versions(apps, since) if history is None else target.versions_in(history, apps, since)
        own_version, legacy_version = versions.get(own), versions.get(legacy)
        if own_version is None and legacy_version is not None and legacy_version >= self.batch_id:
            return TargetPlan(done=True)  # a batch of this epoch written before fences came
        views = [Orphan(claim.batch_id, claim.scheme, ids, app, versions.get(app)) for claim, ids, app in claimed]
        ids = {mid for mid in table.column("messageId").to_pylist() if mid is not None}
        return plan_target(own, own_version, self.batch_id, ids, views, fenceable=fenceable, pinned=pinned)


def effect_app_id(node: str, epoch: str, effect: Effect, scheme: int = SCHEME) -> str:
    """The app id of ``effect``'s writes: stable per node, epoch and target (``scheme`` 1: before fences,
    whose batches wrote version N; 2: version 2N + 1, fences 2N, :mod:`~safebunny.exactly_once.claims.fence`).
    The step names ``effect``'s table by its identity (:func:`table_identity`), so a second spelling of one table
    is the same app id."""
    return target_app_id(node, epoch, effect.key, scheme)


def target_app_id(node: str, epoch: str, key: tuple[str, str, tuple[str, ...]], scheme: int = SCHEME) -> str:
    """:func:`effect_app_id` of the target ``key`` (kind, table, merge keys) as a claim records it."""
    return f"safebunny.{'effect' if scheme < 2 else 'fx'}.{node}.{epoch}.{_target_hash(key)}"


def _target_hash(key: tuple[str, str, tuple[str, ...]]) -> str:
    kind, table, on = key
    return hashlib.sha1(f"{kind}|{table}|{','.join(on)}".encode()).hexdigest()[:16]


def lock_app_id(node: str, effect: Effect) -> str:
    """The app id every batch of ``node`` (any epoch, any driver) carries in its commits to ``effect``'s table by
    name: batches that can hold one message share a node and a target, so their commits compare-and-set one
    version (:mod:`~safebunny.delta.spark_commits`)."""
    return f"safebunny.lock.{node}.{_target_hash(effect.key)}"


def apply_effect(target: DeltaTarget, effect: Effect, table: pa.Table, app_id: str, version: int,
                 fences: Sequence[tuple[str, int]] = (), guard: Guard | None = None) -> bool:
    """Write ``table`` to ``target`` as ``effect`` unless ``(app_id, version)`` is committed; True when written. A
    fenceable target also writes ``fences`` in the same commit, after ``guard`` accepted the snapshot it commits
    from (:mod:`~safebunny.exactly_once.claims.fence`); another takes neither."""
    if table.num_rows == 0:
        return False
    if effect.kind == "append":
        return target.append(table, app_id, version, fences=fences, guard=guard)
    return target.merge(table, effect.on, app_id, version, fences=fences, guard=guard)
