"""Settling a batch's outcome before it is written, and a row handler's types for the whole batch (pure
pyarrow): failed messages keep no effect or emit row, a merge gets one row per key (last in source
order wins), and one message's values fail that message, never the batch."""

import pyarrow as pa

from safebunny.delta.delta_rs import DeltaRsTarget
from safebunny.delta.merge_rows import last_per_key
from safebunny.delta.spark_sql import last_per_key_sql
from safebunny.exactly_once.collect.materialize import Materialized, identified, settle_outcome
from safebunny.exactly_once.handlers.row_handler import from_rows
from safebunny.exactly_once.handlers.row_types import ROW_TYPE_ERROR, build_tables, infer_schema, type_decisions
from safebunny.exactly_once.outcome import Effect, Emit, FailedRow, Outcome

MERGE = Effect("merge", None, "/t/accounts", ("k",))
APPEND = Effect("append", None, "/t/ledger")
EMIT = Emit(None, "Done", "", "q")


def test_a_failed_message_keeps_no_effect_and_no_emit_row():
    ledger = pa.Table.from_pylist([{"messageId": "m1", "v": 1}, {"messageId": "m9", "v": 9}])
    done = pa.Table.from_pylist([{"messageId": "m9", "n": 1}, {"messageId": "m1", "n": 2}])
    result = Materialized(effects={APPEND.key: (APPEND, ledger)}, emits={EMIT.key: (EMIT, done)},
                          failed={"m9": FailedRow("m9", "credit check said retry later")})
    rejected = {"x": FailedRow("x", "no id", error_type="MalformedMessage")}
    out = settle_outcome(result, {"m1": 0, "m9": 1, "x": 2}, rejected)
    assert out.effects[APPEND.key][1].column("messageId").to_pylist() == ["m1"]
    assert out.emits[EMIT.key][1].column("messageId").to_pylist() == ["m1"]
    assert set(out.failed) == {"m9", "x"}


def test_a_merge_keeps_the_last_row_per_key_in_source_order():
    rows = [{"messageId": "m5", "k": "B", "v": 5}, {"messageId": "m4", "k": "B", "v": 4},
            {"messageId": "m1", "k": "A", "v": 1}, {"messageId": "m6", "k": None, "v": 6},
            {"messageId": "m7", "k": None, "v": 7}, {"messageId": "m2", "k": "A", "v": 2},
            {"messageId": "m2", "k": "A", "v": 3}]
    order = {"m1": 0, "m2": 1, "m4": 2, "m5": 3, "m6": 4, "m7": 5}
    kept = last_per_key(pa.Table.from_pylist(rows), ("k",), order).to_pylist()
    # B: m5 came after m4 in the source, whatever the handler's row order; A: m2's last row; null keys all stay
    assert sorted((r["k"] or "", r["v"]) for r in kept) == [("", 6), ("", 7), ("A", 3), ("B", 5)]
    result = Materialized(effects={MERGE.key: (MERGE, pa.Table.from_pylist(rows))}, failed={"m5": FailedRow("m5", "x")})
    settled = settle_outcome(result, order).effects[MERGE.key][1].to_pylist()
    assert sorted((r["k"] or "", r["v"]) for r in settled) == [("", 6), ("", 7), ("A", 3), ("B", 4)]


def test_a_merge_on_two_columns_and_without_repeats_is_unchanged():
    table = pa.Table.from_pylist([{"messageId": "a", "k": 1, "j": 1}, {"messageId": "b", "k": 1, "j": 2}])
    assert last_per_key(table, ("k", "j"), {"a": 0, "b": 1}).equals(table)


def _decision(table, *rows, kind="append", on=()):
    return {"ok": True, "effects": [{"kind": kind, "table": table, "on": list(on), "rows": list(rows)}], "emits": []}


def test_types_come_from_the_whole_batch_with_nulls_widened():
    assert infer_schema([{"note": None}]).field("note").type == pa.string()
    schema = infer_schema([{"n": 1, "note": None}, {"n": 2.5, "note": None}])
    assert schema.field("n").type == pa.float64() and schema.field("note").type == pa.string()
    assert infer_schema([{"code": 1}, {"code": "A1"}]).field("code").type == pa.int64()  # first wins


def test_a_message_whose_values_do_not_fit_fails_alone():
    decisions = {"m3": _decision("/t/codes", {"messageId": "m3", "code": 1}),
                 "m4": _decision("/t/codes", {"messageId": "m4", "code": "A1"}),
                 "m5": _decision("/t/codes", {"messageId": "m5", "code": None})}
    typed = type_decisions(decisions, lambda table: None)
    assert typed["m3"]["ok"] and typed["m5"]["ok"] and not typed["m4"]["ok"]
    assert typed["m4"]["error_type"] == ROW_TYPE_ERROR and "code='A1'" in typed["m4"]["reason"]
    result = build_tables(typed, lambda table: None)
    assert result.effects[("append", "/t/codes", ())][1].column("code").to_pylist() == [1, None]
    assert set(result.failed) == {"m4"}


def test_the_target_tables_types_win_and_an_unknown_column_fails_the_row():
    target = pa.schema([("messageId", pa.string()), ("k", pa.string()), ("note", pa.string())])
    decisions = {"m1": _decision("/t/notes", {"messageId": "m1", "k": "a", "note": None}),
                 "m2": _decision("/t/notes", {"messageId": "m2", "k": "b", "extra": 1}),
                 "m3": _decision("/t/notes", {"messageId": "m3", "k": 7})}
    typed = type_decisions(decisions, lambda table: target)
    assert typed["m1"]["ok"]
    assert "column 'extra'" in typed["m2"]["reason"] and "k=7" in typed["m3"]["reason"]
    table = build_tables(typed, lambda table: target).effects[("append", "/t/notes", ())][1]
    assert table.schema == target and table.num_rows == 1


def test_emits_of_mixed_types_are_kept_per_message():
    emit = {"type": "T", "exchange": "", "routing_key": "q"}
    decisions = {"m1": {"ok": True, "effects": [], "emits": [{**emit, "rows": [{"messageId": "m1", "code": 1}]}]},
                 "m2": {"ok": True, "effects": [], "emits": [{**emit, "rows": [{"messageId": "m2", "code": "A"}]}]}}
    emits = build_tables(decisions, lambda table: None).emits
    assert sorted(repr(t.column("code").to_pylist()[0]) for _, t in emits.values()) == ["'A'", "1"]


def test_a_row_handler_that_fails_its_message_gives_no_outputs():
    outcome = Outcome(effects=[Effect("append", {"v": 1}, "/t/x")], failed=[FailedRow("m1", "said no")])
    assert from_rows("m1", outcome) == {"ok": False, "reason": "said no", "error_type": None, "attempts": 1}


def test_delta_rs_merge_with_two_rows_for_one_key_keeps_the_last(tmp_path):
    target = DeltaRsTarget(str(tmp_path / "t"))
    target.merge(pa.table({"messageId": ["m1", "m2"], "k": ["A", "A"], "v": [1, 2]}), ["k"], "app", 0)  # new key
    target.merge(pa.table({"messageId": ["m3", "m4"], "k": ["A", "A"], "v": [3, 4]}), ["k"], "app", 1)  # existing
    assert target.read().to_pylist() == [{"messageId": "m4", "k": "A", "v": 4}]


def test_spark_delta_keeps_the_last_row_per_key_in_sql():
    assert last_per_key_sql("src", ["k", "j"], ["messageId", "k", "j"]) == (
        "SELECT `messageId`, `k`, `j` FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY `k`, `j` ORDER BY "
        "`_safebunnyOrder` DESC) AS `_safebunnyRank` FROM `src`) WHERE `_safebunnyRank` = 1 OR `k` IS NULL OR "
        "`j` IS NULL")


def test_a_fraction_into_an_integer_column_fails_rather_than_truncate():
    target = pa.schema([("messageId", pa.string()), ("n", pa.int64())])
    decisions = {"m1": _decision("/t/n", {"messageId": "m1", "n": 2.0}),
                 "m2": _decision("/t/n", {"messageId": "m2", "n": 1.5})}
    typed = type_decisions(decisions, lambda table: target)
    assert typed["m1"]["ok"] and "n=1.5" in typed["m2"]["reason"]


def test_two_spellings_of_one_table_are_one_target_with_its_rows_together():
    """A handler that writes one table under two names gets one effect: one app id, one lock, one merge source."""
    first, second = pa.table({"messageId": ["m1"], "k": [1]}), pa.table({"messageId": ["m2"], "k": [1]})
    result = Materialized(effects={("merge", "db.t", ("k",)): (Effect("merge", None, "db.t", ("k",)), first),
                                   ("merge", "spark_catalog.db.t", ("k",)):
                                       (Effect("merge", None, "spark_catalog.db.t", ("k",)), second)})
    named = identified(result, lambda table: table if table.count(".") == 2 else f"spark_catalog.{table}")
    assert list(named.effects) == [("merge", "spark_catalog.db.t", ("k",))]
    effect, rows = named.effects["merge", "spark_catalog.db.t", ("k",)]
    assert effect.table == "spark_catalog.db.t" and rows.column("messageId").to_pylist() == ["m1", "m2"]
    settled = settle_outcome(named, {"m1": 0, "m2": 1})
    assert settled.effects["merge", "spark_catalog.db.t", ("k",)][1].column("messageId").to_pylist() == ["m2"]
