"""Message fields -> column values and Arrow batches (pure; no broker, no JVM)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from types import SimpleNamespace

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pyspark.sql.pandas.types import to_arrow_schema

from pyspark_safebunny.schema import schema_for
from safebunny.amqp import message_rows
from safebunny.amqp.message_rows import arrow_schema, render_header_value, render_headers, rows_to_record_batch

UTC = dt.timezone.utc


def test_public_api():
    assert set(message_rows.__all__) == {  # what other packages import
        "arrow_schema", "as_text", "render_header_value", "render_headers", "rows_to_record_batch", "AmqpColumns",
    }


@pytest.mark.parametrize("include_headers", [False, True])
def test_arrow_schema_is_exactly_what_spark_expects(include_headers):
    expected = to_arrow_schema(schema_for(include_headers, include_offset=True), timezone="UTC")
    assert arrow_schema(include_headers).equals(expected)
    assert rows_to_record_batch({}, include_headers).schema.equals(expected)


def test_the_spark_schema_is_the_documented_one():
    """Spark's schema is derived from the one Arrow message schema; this is what users see (docs/source.md)."""
    schema = schema_for(True, include_offset=True)
    assert schema.simpleString() == (
        "struct<value:binary,messageId:string,correlationId:string,routingKey:string,exchange:string,queue:string,"
        "redelivered:boolean,deliveryCount:int,timestamp:timestamp,contentType:string,type:string,"
        "headers:map<string,string>,offset:bigint>")
    assert [f.name for f in schema.fields if not f.nullable] == ["queue", "redelivered"]
    assert schema_for(False, include_offset=False).fieldNames() == schema.fieldNames()[:-2]


@pytest.mark.parametrize(
    "value, text",
    [
        ("plain", "plain"),
        (b"caf\xc3\xa9", "café"),
        (b"\xff\x00\xfe", "/wD+"),
        (True, "true"),
        (False, "false"),
        (42, "42"),
        (-7, "-7"),
        (1.5, "1.5"),
        (Decimal("12.340"), "12.340"),
        (dt.datetime(2024, 5, 1, 12, 0, 0), "2024-05-01T12:00:00+00:00"),
        ({"b": 1, "a": [1, b"x", None], "c": {"z": True, "y": b"\xff"}},
         '{"a":[1,"x",null],"b":1,"c":{"y":"/w==","z":true}}'),
        ([3, "x", dt.datetime(2024, 1, 1)], '[3,"x","2024-01-01T00:00:00+00:00"]'),
        ({"d": Decimal("1.10")}, '{"d":"1.10"}'),
    ],
)
def test_render_header_value(value, text):
    assert render_header_value(value) == text


def test_render_headers():
    assert render_headers(None) is None
    assert render_headers({}) == {}
    assert render_headers({b"k": b"v", "n": None, "i": 1}) == {"k": "v", "n": None, "i": "1"}


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text() | st.binary(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=12,
)


@given(st.dictionaries(st.text(max_size=5), json_values, max_size=5))
def test_nested_rendering_is_stable_under_key_order(table):
    reordered = dict(reversed(list(table.items())))
    assert render_header_value(table) == render_header_value(reordered)
    assert render_headers(table) == render_headers(reordered)


@pytest.mark.parametrize("include_headers", [False, True])
def test_amqp_columns_map_every_column(include_headers):
    """A delivery's method and properties, column by column, in the source's Arrow schema: AMQP timestamps in
    epoch seconds (or a datetime, naive as UTC) to ``timestamp[us, UTC]``, the delivery count from the quorum
    queue's ``x-delivery-count`` header, header values rendered."""
    when = dt.datetime.fromtimestamp(1_700_000_000, UTC)
    deliveries = [
        (SimpleNamespace(message_id="m1", correlation_id="c1", timestamp=1_700_000_000, content_type="t/j",
                         type="T", headers={"x-delivery-count": 2, "n": {"b": 2, "a": 1}}), b"one", "ex", "rk", True),
        (SimpleNamespace(message_id=None, correlation_id=None, timestamp=None, content_type=None, type=None,
                         headers=None), b"", "", "", False),
        (SimpleNamespace(message_id="m3", correlation_id=None, timestamp=dt.datetime(2024, 5, 1, 12),
                         content_type=None, type=None, headers=None), b"x", "", "q", False),
    ]
    columns = message_rows.AmqpColumns(include_headers)
    for props, body, exchange, key, redelivered in deliveries:
        columns.append(body, props, exchange, key, redelivered)
    columns.append(b"o", deliveries[1][0], "", "", offset=5)
    assert len(columns) == 4
    empty = {"messageId": None, "correlationId": None, "deliveryCount": None, "timestamp": None, "contentType": None,
             "type": None, "offset": None}
    expected = [
        {"value": b"one", "messageId": "m1", "correlationId": "c1", "routingKey": "rk", "exchange": "ex",
         "queue": "q", "redelivered": True, "deliveryCount": 2, "timestamp": when, "contentType": "t/j",
         "type": "T", "offset": None, "headers": [("n", '{"a":1,"b":2}'), ("x-delivery-count", "2")]},
        {**empty, "value": b"", "routingKey": "", "exchange": "", "queue": "q", "redelivered": False,
         "headers": None},
        {**empty, "value": b"x", "messageId": "m3", "routingKey": "q", "exchange": "", "queue": "q",
         "redelivered": False, "timestamp": dt.datetime(2024, 5, 1, 12, tzinfo=UTC), "headers": None},
        {**empty, "value": b"o", "routingKey": "", "exchange": "", "queue": "q", "redelivered": False, "offset": 5,
         "headers": None},
    ]
    batch = columns.to_batch("q")
    assert batch.schema.equals(arrow_schema(include_headers))
    got = batch.to_pylist()
    if not include_headers:
        expected = [{k: v for k, v in row.items() if k != "headers"} for row in expected]
    assert [dict(sorted(r.items())) for r in got] == [dict(sorted(r.items())) for r in expected]


def test_rows_to_record_batch_from_columns():
    when = dt.datetime(2024, 5, 1, 12, 0, 0, 250, tzinfo=UTC)
    micros = int(when.timestamp()) * 1_000_000 + 250
    columns = {"value": [b"a", None], "messageId": ["1", None], "queue": ["q", "q"],
               "redelivered": [False, True], "timestamp": [micros, None],
               "headers": [{"k": "v"}, None], "offset": [10, 11]}
    batch = rows_to_record_batch(columns, include_headers=True)
    assert batch.num_rows == 2
    got = batch.to_pylist()
    assert got[0]["timestamp"] == when
    assert got[0]["headers"] == [("k", "v")]
    assert got[1]["headers"] is None and got[1]["redelivered"] is True
    assert got[0]["deliveryCount"] is None and got[0]["offset"] == 10
    assert rows_to_record_batch({**columns, "timestamp": [when, None]}, include_headers=True).equals(batch)


def test_rows_to_record_batch_rejects_bad_input():
    with pytest.raises(ValueError, match="equal lengths"):
        rows_to_record_batch({"value": [b"a"], "queue": ["q", "q"]}, include_headers=False)
    with pytest.raises(ValueError, match="'queue'"):
        rows_to_record_batch({"value": [b"a"]}, include_headers=False)


def test_record_batch_has_no_headers_column_unless_asked():
    batch = rows_to_record_batch({"queue": ["q"]}, include_headers=False)
    assert "headers" not in batch.schema.names
    assert isinstance(batch, pa.RecordBatch)


def test_render_headers_orders_keys():
    assert list(render_headers({"b": 1, "a": 2, "c": None})) == ["a", "b", "c"]


def _props(i: int) -> SimpleNamespace:
    return SimpleNamespace(message_id=f"m{i}", correlation_id=None, timestamp=None, content_type=None, type=None,
                           headers=None)


def test_batches_over_the_chunk_limit_are_split_in_order_with_the_spark_schema():
    """A batch whose bodies exceed what one Arrow binary array holds (2 GiB) is split into record
    batches of bounded body bytes; here with the limit lowered to 100 bytes."""
    columns = message_rows.AmqpColumns(False)
    sizes = [30, 30, 30, 30, 250, 0, 10, 90, 5]
    for i, size in enumerate(sizes):
        columns.append(bytes([65 + i]) * size, _props(i), "", "rk")
    batches = columns.to_batches("q", max_chunk_bytes=100)
    expected = to_arrow_schema(schema_for(False, include_offset=True), timezone="UTC")
    assert [b.num_rows for b in batches] == [3, 1, 1, 3, 1]
    for b in batches:
        assert b.schema.equals(expected) and b.schema.field("value").type == pa.binary()
        body_bytes = sum(len(v) for v in b.column("value").to_pylist())
        assert body_bytes <= 100 or b.num_rows == 1
    table = pa.Table.from_batches(batches)
    assert table.column("messageId").to_pylist() == [f"m{i}" for i in range(len(sizes))]
    assert [len(v) for v in table.column("value").to_pylist()] == sizes
    assert table.column("queue").to_pylist() == ["q"] * len(sizes)
    assert columns.to_batches("q")[0].equals(columns.to_batch("q"))  # under the default limit: one batch
    assert message_rows.AmqpColumns(True).to_batches("q") == []


@pytest.mark.parametrize("include_headers", [False, True])
def test_extend_builds_the_same_batch_as_append(include_headers):
    """The reader's column-at-a-time path gives exactly the rows of the row-at-a-time one."""
    props = [SimpleNamespace(message_id=f"m{i}", correlation_id="c" if i % 2 else None,
                             timestamp=1_700_000_000 + i if i % 3 else None, content_type="t/j", type=None,
                             headers={"x-delivery-count": i, "k": b"v"} if i % 4 == 0 else None)
             for i in range(12)]
    bodies = [bytes([i]) * i for i in range(12)]
    exchanges = ["ex" if i % 2 else "" for i in range(12)]
    keys = [f"rk{i}" for i in range(12)]
    redelivered = [i % 5 == 0 for i in range(12)]
    one = message_rows.AmqpColumns(include_headers)
    for i in range(12):
        one.append(bodies[i], props[i], exchanges[i], keys[i], redelivered[i])
    many = message_rows.AmqpColumns(include_headers)
    many.extend(bodies, props, exchanges, keys, redelivered)
    assert len(many) == 12
    assert many.to_batch("q").equals(one.to_batch("q"))
