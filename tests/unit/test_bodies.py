"""A saga step's bodies (``saga.bodies``): the schema parsed at declaration, and the one reader that gives a row
handler its message and a DataFrame handler its input, rejecting the same bodies with the same reasons. Pure
pyarrow and PySpark types, no session; ``tests/e2e/test_fast_paths.py`` hands a prepared input to Spark."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import orjson
import pyarrow as pa
import pytest
from pyspark.sql import types as T

from safebunny.errors import SafeBunnyOptionError
from safebunny.saga.define.bodies import Body, MalformedMessage
from safebunny.saga.define.definition import SagaStep

SOURCE = T.StructType([T.StructField("messageId", T.StringType()), T.StructField("correlationId", T.StringType()),
                       T.StructField("type", T.StringType()), T.StructField("value", T.BinaryType())])


def _step(schema: str, strict: bool = True) -> SagaStep:
    return SagaStep("n", "T", "src", schema, lambda df, ctx: None, strict_schema=strict)


def _rows(*bodies: object) -> pa.Table:
    values = [b if isinstance(b, bytes) or b is None else orjson.dumps(b) for b in bodies]
    n = len(values)
    return pa.table({"messageId": [f"m{i}" for i in range(n)], "correlationId": [f"c{i}" for i in range(n)],
                     "type": ["T"] * n, "value": pa.array(values, pa.binary())})


def _reason(body: Body, raw: bytes | None) -> str:
    with pytest.raises(MalformedMessage) as err:
        body.read(raw)
    return str(err.value)


# ------------------------------------------------------------------------------------- the schema
@pytest.mark.parametrize("bad, words", [("orderId string,", "no field after it"), ("a int b int", "expected ','"),
                                        ("a array<int", "ends early"), ("", "DDL text"),
                                        ("a interval", "unknown type 'interval'"),
                                        ("a map<int,string>", "keys that are not strings"),
                                        ("a decimal(x)", "expected a number but found 'x'")])
def test_schema_errors_say_what(bad, words):
    with pytest.raises(SafeBunnyOptionError, match=words):
        Body(bad, "s.T")


def test_a_struct_type_of_a_type_no_body_has_is_refused_at_declaration():
    with pytest.raises(SafeBunnyOptionError, match=r"Step s\.T: .*type void is not one a JSON body can have"):
        Body(T.StructType([T.StructField("a", T.NullType())]), "s.T")


def test_schema_ddl_covers_spark_types():
    schema = Body("`we ird` string COMMENT 'x', qty int NOT NULL, amount bigint, price decimal(10,2), "
                  "tags array<string>, addr struct<city:string, zip:int>, m map<string,double>, ok boolean, "
                  "day date, at timestamp, raw binary, v varchar(5), local timestamp_ntz", "s.T").struct
    assert schema.simpleString() == (
        "struct<we ird:string,qty:int,amount:bigint,price:decimal(10,2),tags:array<string>,"
        "addr:struct<city:string,zip:int>,m:map<string,double>,ok:boolean,day:date,at:timestamp,raw:binary,v:string,"
        "local:timestamp_ntz>")
    assert not schema["qty"].nullable


# ------------------------------------------------------------------------------------- strict bodies
SCHEMA = Body("userId string, amount bigint, qty int, price double, ok boolean, tags array<string>, "
              "addr struct<city:string>, n int NOT NULL, m map<string,int>, day date, at timestamp, "
              "cost decimal(5,2), raw binary", "s.T")


@pytest.mark.parametrize("body, words", [
    ({"userId": 17, "n": 1}, "field 'userId' has 17 (a number), but the schema expects string"),
    ({"amount": "abc", "n": 1}, "field 'amount' has \"abc\" (a string), but the schema expects bigint"),
    ({"userId": {"a": 1}, "n": 1}, "field 'userId' has {\"a\":1} (an object)"),
    ({"qty": 1.5, "n": 1}, "field 'qty' has 1.5"),
    ({"qty": 2 ** 31, "n": 1}, "out of its range"),
    ({"ok": 1, "n": 1}, "field 'ok' has 1 (a number), but the schema expects boolean"),
    ({"price": "1.0", "n": 1}, "field 'price'"),
    ({"tags": ["a", 2], "n": 1}, "field 'tags[1]' has 2"),
    ({"addr": {"city": 3}, "n": 1}, "field 'addr.city' has 3"),
    ({"m": {"k": "v"}, "n": 1}, "field \"m['k']\" has \"v\" (a string), but the schema expects int"),
    ({}, "field 'n' is null or missing, but the schema says NOT NULL"),
    ({"day": "2026-13-01", "n": 1}, "field 'day' has \"2026-13-01\" (a string), but the schema expects date (not an"),
    ({"at": 1700000000, "n": 1}, "field 'at' has 1700000000 (a number), but the schema expects timestamp"),
    ({"cost": 1234.5, "n": 1}, "field 'cost' has 1234.5 (a number), but the schema expects decimal(5,2) (out of"),
    ({"raw": "!!", "n": 1}, "field 'raw' has \"!!\" (a string), but the schema expects binary (not base64)"),
])
def test_a_wrong_json_type_is_named_with_field_value_and_type(body, words):
    reason = _reason(SCHEMA, orjson.dumps(body))
    assert reason.startswith("the body does not match the schema 'userId string, ") and words in reason


def test_matching_bodies_pass_with_nulls_missing_fields_and_extra_fields_and_values_get_their_types():
    raw = orjson.dumps({"userId": "u", "amount": 2 ** 40, "qty": 3, "price": 2, "ok": False, "tags": [],
                        "addr": {"city": "x", "zip": 1}, "n": 0, "m": {"a": 1, "b": None}, "day": "2026-11-24",
                        "at": "2026-11-24T10:00:00+02:00", "cost": 1.005, "raw": "AAE=", "extra": {"any": 1}})
    body, fields = SCHEMA.read(raw)
    assert body["extra"] == {"any": 1} and "extra" not in fields
    assert fields["price"] == 2.0 and isinstance(fields["price"], float) and fields["addr"] == {"city": "x"}
    assert fields["day"] == dt.date(2026, 11, 24) and fields["raw"] == b"\x00\x01"
    assert fields["m"] == {"a": 1, "b": None} and fields["at"] == dt.datetime(2026, 11, 24, 8, tzinfo=dt.timezone.utc)
    assert fields["cost"] == Decimal("1.01")  # half up
    wide = Body("v decimal(38,18)", "s.T").read(b'{"v": 12345678901234567.123456789}')[1]["v"]
    assert wide == Decimal("12345678901234567.123456789")  # read exactly, not through a double
    assert SCHEMA.read(b'{"userId": null, "n": 5}')[1]["userId"] is None


NOT_JSON = "the body does not parse as JSON ("


@pytest.mark.parametrize("raw, words", [(b"not json", NOT_JSON), (b'{"n": NaN}', NOT_JSON),
                                        (b"{'n': 1}", NOT_JSON), (b"", NOT_JSON), (None, NOT_JSON),
                                        (b"[1, 2]", "JSON but not an object"),
                                        (b'"text"', "JSON but not an object")])
def test_a_body_that_is_not_a_json_object_is_malformed(raw, words):
    assert words in _reason(SCHEMA, raw)
    assert words in _reason(Body("a int", "s.T", strict=False), raw)


def test_a_lenient_schema_coerces_to_strings_and_nulls_what_does_not_fit():
    loose = Body("a string, q bigint, day date, tags array<int>, n int NOT NULL", "s.T", strict=False)
    assert loose.read(b'{"a": {"x": [1, 2]}, "q": "abc", "day": "soon", "tags": [1, "b"]}')[1] == {
        "a": '{"x":[1,2]}', "q": None, "day": None, "tags": [1, None], "n": None}


# ------------------------------------------------------------------------------------- rows and frames
def test_a_row_handler_s_message_is_the_row_with_the_body_and_its_typed_fields():
    row = {"messageId": "m1", "value": b'{"day": "2026-11-24", "extra": 1, "messageId": "x"}'}
    assert _step("day date").body.message(row) == {**row, "messageId": "x", "day": dt.date(2026, 11, 24),
                                                   "extra": 1}
    assert _step("day date", strict=False).body.message(row)["day"] == "2026-11-24"  # as it is


def test_the_input_has_the_source_columns_then_the_body_fields():
    step = _step("orderId bigint, amount double, tags array<string>, who struct<name: string, age int>, "
                 "day date, at timestamp, cost decimal(10,2), m map<string,int>")
    prepared = step.body.prepare(_rows({"orderId": 7, "amount": 2, "tags": ["a"], "who": {"name": "x", "age": 3},
                                        "extra": True, "day": "2026-11-24", "at": "2026-11-24T10:00:00Z",
                                        "cost": 2.5, "m": {"k": 1}}, {"orderId": 8}), SOURCE)
    assert not prepared.rejected
    assert prepared.schema.fieldNames() == ["messageId", "correlationId", "type", "value", "orderId", "amount",
                                            "tags", "who", "day", "at", "cost", "m"]
    assert all(f.nullable for f in prepared.schema.fields)
    rows = prepared.table.to_pylist()
    assert rows[0]["orderId"] == 7 and rows[0]["amount"] == 2.0 and rows[0]["tags"] == ["a"]
    assert rows[0]["who"] == {"name": "x", "age": 3} and rows[0]["day"] == dt.date(2026, 11, 24)
    assert rows[0]["at"] == dt.datetime(2026, 11, 24, 10, tzinfo=dt.timezone.utc)
    assert rows[0]["cost"] == Decimal("2.50") and rows[0]["m"] == [("k", 1)]
    assert rows[1]["amount"] is None and rows[1]["who"] is None


def test_a_body_field_named_like_a_source_column_replaces_it():
    prepared = _step("type string, qty int").body.prepare(_rows({"type": "gift", "qty": 1}), SOURCE)
    assert prepared.schema.fieldNames() == ["messageId", "correlationId", "value", "type", "qty"]
    assert prepared.table.column("type").to_pylist() == ["gift"]


def test_bodies_that_do_not_parse_are_rejected_with_the_reason_a_row_handler_gets_and_rows_stay_aligned():
    step = _step("userId string, qty int")
    bodies = ({"userId": "u", "qty": 1}, {"userId": 17, "qty": 1}, {"userId": "v", "qty": 2**40}, b"NaN", None)
    prepared = step.body.prepare(_rows(*bodies), SOURCE)
    assert prepared.table.num_rows == 5 and set(prepared.rejected) == {"m1", "m2", "m3", "m4"}
    first = prepared.rejected["m1"]
    assert first.error_type == "MalformedMessage" and first.correlation_id == "c1"
    for i, raw in enumerate(_rows(*bodies).column("value").to_pylist()[1:], start=1):
        with pytest.raises(MalformedMessage) as err:
            step.body.message({"value": raw})
        assert prepared.rejected[f"m{i}"].reason == str(err.value)
    assert "out of its range" in prepared.rejected["m2"].reason
    assert prepared.table.column("userId").to_pylist() == ["u", None, None, None, None]


def test_a_lenient_step_s_input_has_coerced_columns():
    prepared = _step("userId string, qty int", strict=False).body.prepare(_rows({"userId": 17, "qty": "x"}), SOURCE)
    assert not prepared.rejected and prepared.table.select(["userId", "qty"]).to_pylist() == [
        {"userId": "17", "qty": None}]
