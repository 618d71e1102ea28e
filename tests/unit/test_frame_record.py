"""A DataFrame handler's recorded outcome (exactly_once/handlers/frame_record.py): the record's round trip, and which
record a batch takes (its own on a replay, an orphan's for the ids its claim holds), with real claim files."""

import datetime as dt
import decimal
from types import SimpleNamespace

import pyarrow as pa

from safebunny.exactly_once.claims.log import ClaimLog
from safebunny.exactly_once.collect.batch import Batch
from safebunny.exactly_once.collect.materialize import Materialized
from safebunny.exactly_once.handlers.frame_record import FrameRecords, decode, encode, only
from safebunny.exactly_once.outcome import Effect, Emit, FailedRow, StepContext


def _outcome(ids, attempt, failed=()):
    """What a handler that reads a counter decides: one effect row and one emit per id, carrying ``attempt``."""
    out = Materialized()
    ok = [m for m in ids if m not in failed]
    effect, item = Effect("append", None, "/t/effects"), Emit(None, "Billed", "", "out")
    out.effects[effect.key] = (effect, pa.table({"messageId": ok, "attempt": [attempt] * len(ok)}))
    out.emits[item.key] = (item, pa.table({"messageId": ok, "outputIndex": [attempt] * len(ok)}))
    out.failed = {m: FailedRow(m, f"down at attempt {attempt}", 1, None, "IOError") for m in failed}
    return out


def _attempts(outcome):
    return dict(zip(*outcome.effects[("append", "/t/effects", ())][1].to_pydict().values(), strict=True))


def test_a_record_keeps_every_table_with_its_types_and_the_failed_rows():
    out = Materialized()
    effect = Effect("merge", None, "/t/ledger", ("orderId", "day"))
    table = pa.table({"messageId": ["a", "b"], "orderId": [1, None],
                      "at": pa.array([dt.datetime(2026, 12, 7, 5, 0), None], pa.timestamp("us", "UTC")),
                      "amount": pa.array([decimal.Decimal("1.10"), decimal.Decimal("2.00")], pa.decimal128(10, 2)),
                      "blob": [b"\x00\x01", b""], "nested": [{"x": [1, 2]}, {"x": []}]})
    item = Emit(None, "Billed", None, None)
    out.effects[effect.key] = (effect, table)
    out.emits[item.key] = (item, pa.table({"messageId": ["a"], "value": ["{}"]}))
    out.failed = {"c": FailedRow("c", "bad", 3, "corr", "ValueError")}
    ids, back = decode(b"".join(bytes(part) for part in encode(["a", "b", "c"], out)))
    assert ids == ["a", "b", "c"]
    assert back.effects[effect.key][0] == effect and back.effects[effect.key][1].equals(table)
    assert back.emits[item.key][0] == item and back.emits[item.key][1].to_pylist() == [{"messageId": "a",
                                                                                         "value": "{}"}]
    assert back.failed == out.failed
    picked = only(back, {"b", "c"})
    assert picked.effects[effect.key][1].column("messageId").to_pylist() == ["b"]
    assert picked.emits[item.key][1].num_rows == 0 and set(picked.failed) == {"c"}
    assert only(back, {"c"}, failed=False).failed == {}


def _records(tmp_path):
    inbox = SimpleNamespace(state=str(tmp_path), done=set(), batch_done=lambda e, b: (e, b) in inbox.done)
    claims = ClaimLog(str(tmp_path), "billing")
    return FrameRecords(SimpleNamespace(node="billing", inbox=inbox, claims=claims)), inbox, claims


def _new(ids):
    return Batch.of(pa.table({"messageId": ids, "value": [b"{}"] * len(ids)})).new(set())


class _Handler:
    """A DataFrame handler whose outputs depend on a counter that moves at every call; ``failing`` fail in its first
    call only (a service that was down)."""

    def __init__(self, failing=()):
        self.calls, self.failing = [], set(failing)

    def __call__(self, part):
        self.calls.append(list(part.ids))
        return _outcome(part.ids, len(self.calls), [m for m in part.ids if m in self.failing and len(self.calls) == 1])


def test_a_replay_of_a_batch_takes_its_record_and_never_runs_the_handler_again(tmp_path):
    records, _, _ = _records(tmp_path)
    handler, ctx = _Handler(failing={"c"}), StepContext("billing", 3, "epoch-1")
    first = records.run(_new(["a", "b", "c"]), ctx, handler)
    replay = records.run(_new(["a", "b", "c"]), ctx, handler)
    assert handler.calls == [["a", "b", "c"]]
    assert _attempts(replay) == _attempts(first) == {"a": 1, "b": 1}
    assert set(replay.failed) == {"c"}, "in its own epoch a failed row is replayed as failed (its routing was sent)"
    # a replay that finds some ids done meanwhile takes only the rest of its record
    assert _attempts(records.run(_new(["b"]), ctx, handler)) == {"b": 1} and len(handler.calls) == 1


def test_a_new_epoch_takes_an_orphans_record_for_the_ids_its_claim_holds(tmp_path):
    records, inbox, claims = _records(tmp_path)
    handler = _Handler(failing={"c"})
    records.run(_new(["a", "b", "c"]), StepContext("billing", 1, "old"), handler)
    claims.write("old", 1, ["a", "b"], {("append", "/t/effects", ()): ["a", "b"]})  # c failed: never claimed
    got = records.run(_new(["b", "c", "d"]), StepContext("billing", 0, "new"), handler)
    assert handler.calls[1] == ["c", "d"], "the orphan's failure is decided again, and what no record holds"
    assert _attempts(got) == {"b": 1, "c": 2, "d": 2} and not got.failed
    # the new batch's own record is whole before its claim: its replay takes it, the orphan's part included
    assert _attempts(records.run(_new(["b", "c", "d"]), StepContext("billing", 0, "new"), handler)) == _attempts(got)
    assert len(handler.calls) == 2
    # an orphan whose marker is in is not one (its ids are done), and a retired claim's record is forgotten
    inbox.done.add(("old", 1))
    assert _attempts(records.run(_new(["a"]), StepContext("billing", 1, "new"), handler)) == {"a": 3}
    records.forget("old", 1)
    assert records.read("old", 1) is None and records.read("new", 0) is not None


def test_a_claim_without_a_record_is_decided_afresh_and_old_records_of_the_epoch_are_forgotten(tmp_path):
    records, _, claims = _records(tmp_path)
    handler = _Handler()
    claims.write("old", 4, ["a"], {})  # a batch killed between its claim and its record: it applied nothing
    assert _attempts(records.run(_new(["a"]), StepContext("billing", 0, "new"), handler)) == {"a": 1}
    for batch_id in (1, 2):
        records.run(_new([f"m{batch_id}"]), StepContext("billing", batch_id, "new"), handler)
    records.forget_before("new", 3)
    assert [records.read("new", b) is not None for b in (0, 1, 2)] == [False, False, True]
    assert records.run(_new([]), StepContext("billing", 9, "new"), handler).effects == {}
