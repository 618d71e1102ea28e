"""Fences (pure logic): what a target's app transaction says of a batch, and how a batch plans a target beside
other claims on its ids (issue 35, case 3: two drivers on one batch)."""

import pytest

from safebunny.exactly_once.claims.fence import (
    APPLIED,
    FENCED,
    OPEN,
    FenceMoved,
    Orphan,
    TargetPlan,
    apply_version,
    check_expected,
    fence_version,
    plan_target,
    state_of,
)


def test_versions_tell_open_fenced_and_applied_apart():
    assert (fence_version(4), apply_version(4)) == (8, 9)
    assert [state_of(v, 4) for v in (None, 3, 7, 8, 9, 12)] == [OPEN, OPEN, OPEN, FENCED, APPLIED, APPLIED]
    assert [state_of(v, 4, scheme=1) for v in (None, 3, 4, 5)] == [OPEN, OPEN, APPLIED, APPLIED], "before fences"
    assert apply_version(4, scheme=1) == 4


def test_ids_an_orphan_applied_are_left_out_and_an_open_orphan_is_fenced_in_the_same_commit():
    applied = Orphan(2, 2, frozenset({"a", "b"}), "app-x", 5)
    open_ = Orphan(7, 2, frozenset({"c", "z"}), "app-y", None)
    plan = plan_target("me", None, 0, {"a", "c", "d"}, [applied, open_], fenceable=True)
    assert plan == TargetPlan(frozenset({"a"}), (("app-y", 14),), {"me": None, "app-y": None})


def test_an_orphan_fenced_already_is_fenced_again_and_expected_as_read():
    """Another batch fenced it; this commit names it again so that it conflicts with the fenced batch's own."""
    plan = plan_target("me", None, 0, {"c"}, [Orphan(7, 2, frozenset({"c"}), "app-y", 14)], fenceable=True)
    assert plan.fences == (("app-y", 14),) and plan.expect == {"me": None, "app-y": 14}


def test_a_batch_whose_commit_is_in_writes_nothing_and_a_fenced_one_plans_only_from_a_pinned_listing():
    """Issue 48, case 1: fenced after it listed the claims, a batch's listing may miss the fencer (whose claim can
    be gone by now) and its version ``2N`` does not move when it is fenced again: it must list again after reading
    the table's version, and commit from that version only."""
    assert plan_target("me", 9, 4, {"a"}, [], fenceable=True).done
    assert plan_target("me", 8, 4, {"a"}, [], fenceable=True) == TargetPlan(stale=True)
    fenced = plan_target("me", 8, 4, {"a"}, [], fenceable=True, pinned=17)
    assert not fenced.done and not fenced.stale and fenced.expect == {"me": 8} and fenced.pin == 17
    assert plan_target("me", None, 4, {"a"}, [], fenceable=True, pinned=17).pin is None, "open: no pin needed"


def test_a_fenced_plan_is_refused_from_any_other_table_version():
    plan = plan_target("me", 8, 4, {"a"}, [], fenceable=True, pinned=17)
    check_expected(plan, "/t", {"me": 8}.get, 17)
    with pytest.raises(FenceMoved, match="moved from version 17 to 18"):
        check_expected(plan, "/t", {"me": 8}.get, 18)  # fenced again meanwhile: still 8, but the table moved


def test_orphans_without_a_shared_id_and_unfenceable_targets_take_no_fence():
    far = Orphan(1, 2, frozenset({"q"}), "app-q", None)
    assert plan_target("me", None, 0, {"a"}, [far], fenceable=True).fences == ()
    by_name = plan_target("me", None, 0, {"a"}, [Orphan(1, 2, frozenset({"a"}), "app-n", None)], fenceable=False)
    assert by_name == TargetPlan(), "a table by name: applied or open, never fenced (Spark Delta takes one txn)"
    legacy = plan_target("me", None, 0, {"a", "b"}, [Orphan(3, 1, frozenset({"a", "b"}), "old", 3)], fenceable=True)
    assert legacy.leave_out == {"a", "b"} and legacy.fences == ()


def test_a_moved_version_refuses_the_commit():
    plan = TargetPlan(expect={"me": None, "app-y": 14})
    check_expected(plan, "/t", {"me": None, "app-y": 14}.get)
    with pytest.raises(FenceMoved, match="app-y.*from 14 to 15"):
        check_expected(plan, "/t", {"me": None, "app-y": 15}.get)
