"""Claims of a step's batches: which rows an orphaned batch of another epoch already applied (pure logic),
and the claim files on a local folder."""

import orjson
import pyarrow as pa

from safebunny.exactly_once.claims.log import Claim, ClaimLog, applied_ids
from safebunny.exactly_once.collect.materialize import without_messages
from safebunny.exactly_once.outcome import Effect

APPEND = ("append", "/t/effects", ())
MERGE = ("merge", "/t/ledger", ("messageId",))


def _claim(epoch, batch, ids, targets=(APPEND, MERGE), at=1000.0):
    return Claim(epoch, batch, frozenset(ids), {target: frozenset(ids) for target in targets}, at)


def test_leave_out_keeps_other_rows_and_rows_without_an_id():
    table = pa.table({"messageId": ["a", "b", None, "c"], "v": [1, 2, 3, 4]})
    assert without_messages(table, {"a", "c"}).to_pydict() == {"messageId": ["b", None], "v": [2, 3]}
    assert without_messages(table, set()) is table


def test_applied_ids_count_superseded_merge_rows_and_never_a_failed_id():
    handled = {MERGE: (Effect("merge", None, "/t/ledger", ("messageId",)),
                       pa.table({"messageId": ["a", "b", "x"], "k": [1, 1, 2]})),
               APPEND: (Effect("append", None, "/t/effects"), pa.table({"messageId": ["a", None]})),
               ("append", "/t/other", ()): (Effect("append", None, "/t/other"), pa.table({"messageId": ["a"]}))}
    written = {MERGE: (handled[MERGE][0], pa.table({"messageId": ["b"], "k": [1]})), APPEND: handled[APPEND]}
    assert applied_ids(handled, written, {"x"}) == {MERGE: {"a", "b"}, APPEND: {"a"}}


def test_a_claim_of_an_older_version_counts_every_id_for_every_target():
    raw = orjson.dumps({"epoch": "E0", "batchId": 1, "ids": ["a", "b"], "targets": [list(APPEND)], "writtenAt": 5})
    claim = Claim.from_json(raw)
    assert claim.applied == {APPEND: {"a", "b"}} and claim.targets == (APPEND,) and claim.scheme == 1
    assert Claim.from_json(_claim("E1", 2, {"a"}).to_json()).scheme == 2


def test_claim_files_round_trip_and_leave_out_the_callers_own(tmp_path):
    log = ClaimLog(str(tmp_path / "inbox"), "billing")
    assert log.others("E1", 0) == []
    written = log.write("E0/odd name", 3, ["d"], {MERGE: ["b"], APPEND: ["a", "b"]})
    log.write("E1", 0, ["c"], {APPEND: ["c"]})
    others = log.others("E1", 0)
    assert others == [written]
    assert others[0].targets == (APPEND, MERGE) and others[0].ids == {"a", "b", "d"}
    assert others[0].applied == {APPEND: {"a", "b"}, MERGE: {"b"}}
    decided_only = log.write("E2", 0, ["e"])  # a row handler's batch with no effect: its decisions only
    assert decided_only.ids == {"e"} and decided_only.targets == ()
    log.remove("E2", 0)
    log.remove("E0/odd name", 3)
    log.remove("E0/odd name", 3)  # a second removal is a no-op
    assert log.others("E1", 0) == [] and len(log.others("E9", 9)) == 1
    assert not list((tmp_path / "inbox" / "_claims").rglob("*.tmp-*")), "no temporary file left"
