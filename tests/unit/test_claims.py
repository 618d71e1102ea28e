"""Claims of a step's batches: which rows an orphaned batch of another epoch already applied (pure logic),
and the claim files on a local folder."""

import datetime as dt

import pyarrow as pa

from safebunny.exactly_once.claims import Claim, ClaimLog, expired, leave_out, settle

APPEND = ("append", "/t/effects", ())
MERGE = ("merge", "/t/ledger", ("messageId",))


def _claim(epoch, batch, ids, targets=(APPEND, MERGE), at=1000.0):
    return Claim(epoch, batch, frozenset(ids), tuple(targets), at)


def test_only_targets_the_orphan_applied_leave_its_ids_out():
    orphan = _claim("E0", 2, {"a", "b", "c"})
    applied = {("E0", APPEND): True, ("E0", MERGE): False}
    done = settle([orphan], ["b", "c", "d"], lambda c, t: applied[(c.epoch, t)])
    assert done == {APPEND: {"b", "c"}}


def test_ids_of_no_orphan_and_targets_the_orphan_did_not_record_are_applied():
    orphan = _claim("E0", 2, {"a"}, targets=(APPEND,))
    assert settle([orphan], ["x", "y"], lambda c, t: True) == {}
    done = settle([orphan], ["a", "x"], lambda c, t: True)
    assert done == {APPEND: {"a"}}, "the merge target was not in the orphan's claim, so it is applied"


def test_two_orphans_of_one_id_each_count():
    first = _claim("E0", 1, {"a"}, targets=(APPEND,))
    second = _claim("E1", 0, {"a", "b"}, targets=(MERGE,))
    done = settle([first, second], ["a", "b"], lambda c, t: True)
    assert done == {APPEND: {"a"}, MERGE: {"a", "b"}}


def test_leave_out_keeps_other_rows_and_rows_without_an_id():
    table = pa.table({"messageId": ["a", "b", None, "c"], "v": [1, 2, 3, 4]})
    assert leave_out(table, {"a", "c"}).to_pydict() == {"messageId": ["b", None], "v": [2, 3]}
    assert leave_out(table, set()) is table


def test_a_claim_older_than_the_window_expires():
    claim = _claim("E0", 0, {"a"}, at=0.0)
    assert expired(claim, dt.timedelta(days=7), now=7 * 86400 + 1)
    assert not expired(claim, dt.timedelta(days=7), now=7 * 86400 - 1)


def test_claim_files_round_trip_and_leave_out_the_callers_own(tmp_path):
    log = ClaimLog(str(tmp_path / "inbox"), "billing")
    assert log.others("E1", 0) == []
    written = log.write("E0/odd name", 3, ["b", "a"], [MERGE, APPEND])
    log.write("E1", 0, ["c"], [APPEND])
    others = log.others("E1", 0)
    assert others == [written]
    assert others[0].targets == (APPEND, MERGE) and others[0].ids == {"a", "b"}
    log.remove("E0/odd name", 3)
    log.remove("E0/odd name", 3)  # a second removal is a no-op
    assert log.others("E1", 0) == [] and len(log.others("E9", 9)) == 1
    assert not list((tmp_path / "inbox" / "_claims").rglob("*.tmp-*")), "no temporary file left"
