"""The pure rules by which a batch that takes over another batch's messages makes that batch unable to commit them.

Batch N of a claim applies with the app transaction ``(app, 2N + 1)`` (:func:`apply_version`); a batch that
applies ids an unapplied orphan claimed writes the orphan's at ``2N`` in the same commit
(:func:`fence_version`); :func:`state_of` reads a target's version as open, fenced or applied, and
:class:`TargetPlan.expect` / :class:`FenceMoved` make a batch whose snapshot moved fail and replay. A batch
fenced out of a target plans it again from a listing made after the table was at :attr:`TargetPlan.pin`, and
commits only from that table version (:attr:`TargetPlan.stale`). The
reasoning: docs/exactly-once.md ("The fence: two batches on the same messages"). Claims of scheme 1 and
targets given by name (Spark Delta) are read as applied or open, never fenced.

Pure logic, tested without Delta; :mod:`~safebunny.exactly_once.claims.takeover` writes the commits.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from safebunny.errors import SafeBunnyError

__all__ = ["APPLIED", "FENCED", "OPEN", "apply_version", "fence_version", "state_of", "TargetPlan", "Orphan",
           "plan_target", "check_expected", "FenceMoved", "StalePlan"]

#: The claim scheme this version writes: effects at 2N + 1, fences at 2N.
SCHEME = 2
APPLIED, FENCED, OPEN = "applied", "fenced", "open"


class FenceMoved(SafeBunnyError):
    """Another batch committed to a target this batch planned against: the batch fails and is replayed."""


class StalePlan(FenceMoved):
    """This batch was fenced out of a target after it listed the claims: it lists them again before planning it."""


def apply_version(batch_id: int, scheme: int = SCHEME) -> int:
    """The app transaction version of batch ``batch_id``'s effect commit."""
    return 2 * batch_id + 1 if scheme >= 2 else batch_id


def fence_version(batch_id: int) -> int:
    """The version another batch writes to fence batch ``batch_id`` out of a target."""
    return 2 * batch_id


def state_of(committed: int | None, batch_id: int, scheme: int = SCHEME) -> str:
    """What a target's version of a batch's app id says: :data:`APPLIED`, :data:`FENCED` or :data:`OPEN`.

    An epoch runs its batches one after another and a batch that failed is replayed before the next, so a
    version above the batch's own can only come from that epoch's later batches, which means this one
    finished."""
    if scheme < 2:
        return APPLIED if committed is not None and committed >= batch_id else OPEN
    if committed is None or committed < fence_version(batch_id):
        return OPEN
    return FENCED if committed == fence_version(batch_id) else APPLIED


@dataclass(frozen=True)
class TargetPlan:
    """How a batch writes one target.

    - ``leave_out``: ids another batch applied there already;
    - ``fences``: ``(app id, version)`` of the batches this commit fences (written in the same commit);
    - ``expect``: app id -> the version read when planning (own and fenced); the commit is refused if any
      moved;
    - ``done``: this batch's own commit is in already (a replay): nothing to write;
    - ``stale``: this batch is fenced here and its listing of claims may predate the fence: nothing may be
      planned from it (list again after reading the table's version, and pass that version as ``pinned``);
    - ``pin``: the table version a fenced batch's plan rests on: its commit is refused from any other.
    """

    leave_out: frozenset[str] = frozenset()
    fences: tuple[tuple[str, int], ...] = ()
    expect: Mapping[str, int | None] = field(default_factory=dict)
    done: bool = False
    stale: bool = False
    pin: int | None = None


@dataclass(frozen=True)
class Orphan:
    """Another claim as one target sees it: its batch, scheme, the ids it recorded there, its app id and
    the version the target holds for that app id."""

    batch_id: int
    scheme: int
    ids: frozenset[str]
    app_id: str
    committed: int | None


def plan_target(own_app: str, own_committed: int | None, batch_id: int, ids: Iterable[str],
                orphans: Iterable[Orphan], fenceable: bool, pinned: int | None = None) -> TargetPlan:
    """The plan for one target: ``ids`` are this batch's ids with rows there; ``fenceable``: the target
    takes several app transactions in one commit (a path, written with delta-rs); ``pinned``: a version of the
    table read before ``orphans`` were listed (and before the inbox was last asked).

    A batch fenced here (its version at ``2N``) is planned only with ``pinned``: the version ``2N`` does not
    change when another batch fences it again, so neither :func:`check_expected` nor the table's own conflict
    check sees a fencer that committed after this batch listed the claims; its ids would be applied twice.
    A listing made after the table was at ``pinned``, with the commit made from that very version, sees every
    batch that applied here (its claim, or once removed its inbox marker)."""
    own_state = state_of(own_committed, batch_id)
    if own_state == APPLIED:
        return TargetPlan(done=True)
    if own_state == FENCED and pinned is None:
        return TargetPlan(stale=True)
    mine = set(ids)
    leave: set[str] = set()
    fences: dict[str, int] = {}
    expect: dict[str, int | None] = {own_app: own_committed} if fenceable else {}
    for orphan in orphans:
        overlap = orphan.ids & mine
        if not overlap:
            continue
        state = state_of(orphan.committed, orphan.batch_id, orphan.scheme)
        if state == APPLIED:
            leave |= overlap
        elif fenceable and orphan.scheme >= 2:  # open or fenced already: fence it (again) in this commit
            fences[orphan.app_id] = fence_version(orphan.batch_id)
            expect[orphan.app_id] = orphan.committed
    return TargetPlan(frozenset(leave), tuple(sorted(fences.items())), expect,
                      pin=pinned if own_state == FENCED else None)


def check_expected(plan: TargetPlan, table: str, read: Callable[[str], int | None],
                   version: int | None = None) -> None:
    """Raise :class:`FenceMoved` when an app id of ``plan`` no longer has the version read when planning, or
    when the table is not at the plan's pin (``version``: the table version the commit would be made from)."""
    if plan.pin is not None and version != plan.pin:
        raise FenceMoved(
            f"The effect table {table!r} moved from version {plan.pin} to {version} while a batch fenced out of it "
            "planned again: another batch committed there. This batch lists the claims and plans again; nothing "
            "is applied twice.")
    for app_id, version in plan.expect.items():
        now = read(app_id)
        if now != version:
            raise FenceMoved(
                f"Another batch committed to the effect table {table!r} while this one was planning (app "
                f"transaction {app_id!r} moved from {version} to {now}): two drivers hold the same messages (a "
                "takeover, a handover or a replay beside a standby). This batch fails and is replayed against "
                "what landed; nothing is applied twice.")

