"""A saga step's bodies parsed on the driver (``saga.body_arrow``): which schemas and batches take the
driver path, what the step's input looks like, and which bodies are rejected with what reason. Pure
pyarrow and PySpark types, no session; ``tests/e2e/test_fast_paths.py`` checks the same rows against
Spark's own parse."""

from __future__ import annotations

import orjson
import pyarrow as pa
import pytest
from pyspark.sql import types as T

from safebunny.saga.body_arrow import parsed_on_driver, prepare_bodies
from safebunny.saga.definition import SagaStep

SOURCE = T.StructType([T.StructField("messageId", T.StringType()), T.StructField("correlationId", T.StringType()),
                       T.StructField("type", T.StringType()), T.StructField("value", T.BinaryType())])


def _step(schema: str, strict: bool = True) -> SagaStep:
    return SagaStep("n", "T", "src", schema, lambda df, ctx: None, strict_schema=strict)


def _rows(*bodies: object) -> pa.Table:
    values = [b if isinstance(b, bytes) or b is None else orjson.dumps(b) for b in bodies]
    n = len(values)
    return pa.table({"messageId": [f"m{i}" for i in range(n)], "correlationId": [f"c{i}" for i in range(n)],
                     "type": ["T"] * n, "value": pa.array(values, pa.binary())})


def test_json_native_types_are_parsed_on_the_driver() -> None:
    assert parsed_on_driver(_step("a string, b bigint, c int, d double, e boolean, f array<struct<x: int>>").struct)
    for schema in ("a date", "a timestamp", "a decimal(10,2)", "a map<string,int>", "a binary",
                   "a array<timestamp>"):
        assert not parsed_on_driver(_step(schema).struct), schema


def test_the_input_has_the_source_columns_then_the_body_fields() -> None:
    step = _step("orderId bigint, amount double, tags array<string>, who struct<name: string, age int>")
    prepared = prepare_bodies(step, _rows({"orderId": 7, "amount": 2, "tags": ["a"], "who": {"name": "x", "age": 3},
                                           "extra": True}, {"orderId": 8}), SOURCE)
    assert prepared is not None and not prepared.rejected
    assert prepared.schema.fieldNames() == ["messageId", "correlationId", "type", "value", "orderId", "amount",
                                            "tags", "who"]
    assert all(f.nullable for f in prepared.schema.fields)
    rows = prepared.table.to_pylist()
    assert rows[0]["orderId"] == 7 and rows[0]["amount"] == 2.0 and rows[0]["tags"] == ["a"]
    assert rows[0]["who"] == {"name": "x", "age": 3}
    assert rows[1]["amount"] is None and rows[1]["who"] is None


def test_a_body_field_named_like_a_source_column_replaces_it() -> None:
    prepared = prepare_bodies(_step("type string, qty int"), _rows({"type": "gift", "qty": 1}), SOURCE)
    assert prepared is not None
    assert prepared.schema.fieldNames() == ["messageId", "correlationId", "value", "type", "qty"]
    assert prepared.table.column("type").to_pylist() == ["gift"]


def test_a_mistyped_body_is_rejected_with_the_field_and_its_row_stays_aligned() -> None:
    prepared = prepare_bodies(_step("userId string, qty int"),
                              _rows({"userId": "u", "qty": 1}, {"userId": 17, "qty": 1}, {"userId": "v", "qty": 2**40}),
                              SOURCE)
    assert prepared is not None and prepared.table.num_rows == 3
    assert set(prepared.rejected) == {"m1", "m2"}
    first = prepared.rejected["m1"]
    assert first.error_type == "MalformedMessage" and first.correlation_id == "c1"
    assert "'userId'" in first.reason and "17" in first.reason and "string" in first.reason
    assert "out of its range" in prepared.rejected["m2"].reason
    assert prepared.table.column("userId").to_pylist() == ["u", None, None]


@pytest.mark.parametrize("body", [b"not json", b"NaN", b"[1, 2]", b"", None, b'"text"'],
                         ids=["text", "nan", "array", "empty", "null", "string"])
def test_a_batch_with_a_body_orjson_does_not_read_as_an_object_takes_spark_s_path(body: bytes | None) -> None:
    assert prepare_bodies(_step("a int"), _rows({"a": 1}, body), SOURCE) is None


def test_lenient_steps_and_spark_only_types_take_spark_s_path() -> None:
    assert prepare_bodies(_step("a int", strict=False), _rows({"a": 1}), SOURCE) is None
    assert prepare_bodies(_step("a date"), _rows({"a": "2026-11-24"}), SOURCE) is None
    assert prepare_bodies(_step("a int"), _rows({"a": 1}), None) is None
