import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from safebunny.amqp import outgoing
from safebunny.amqp.outgoing import (
    ACCEPTED_COLUMNS,
    CAUSATION_HEADER,
    MessageBuilder,
    caused_id,
    content_id,
    plan_sink,
    validate_columns,
)
from safebunny.errors import SafeBunnyOptionError
from safebunny.ids import NAMESPACE, message_id
from safebunny.options import typed
from safebunny.options.connection import ConnectionSettings
from safebunny.options.sink import SinkOptions

OPTS = {"exchange": "safebunny", "routingKey": "billing.InvoiceCreated", "node": None, "type": None,
        "contentType": None}


def _sink(options):
    """The sink options of ``options`` (option names as keys)."""
    return typed(SinkOptions, options, connection=ConnectionSettings("amqp://h"))


def builder(columns=None, scope="batch:0/partition:0", **options):
    return MessageBuilder(plan_sink(_sink({**OPTS, **options}), columns or {"value": "binary"}), scope)


# -- columns ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "columns, option, words",
    [
        ({"value": "binary", "foo": "string"}, "foo",
         ["does not accept the column 'foo'", "Accepted columns:", "'messageId' (string)", "'causationId'",
          "'headers' (map<string,string>)", "'routingKey'", "'exchange'"]),
        ({"value": "binary", "messageid": "string"}, "messageid", ["Did you mean 'messageId'?"]),
        ({"value": "binary", "correlationID": "string"}, "correlationID", ["Did you mean 'correlationId'?"]),
        ({"value": "int"}, "value", ["'value' must be of type binary or string", "it is int", "cast"]),
        ({"value": "binary", "headers": "map<string,int>"}, "headers", ["map<string,string>"]),
        ({"value": "binary", "messageId": "bigint"}, "messageId", ["'messageId' must be of type string"]),
        ({"messageId": "string"}, "value", ["needs a 'value' column", "['messageId']"]),
        ({}, "value", ["needs a 'value' column"]),
    ],
)
def test_bad_columns_are_named_with_the_accepted_list(columns, option, words):
    with pytest.raises(SafeBunnyOptionError) as info:
        validate_columns(columns)
    assert info.value.option == option
    for word in words:
        assert word in str(info.value)


def test_every_accepted_column_with_every_type_passes():
    for name, kinds in ACCEPTED_COLUMNS.items():
        for kind in kinds:
            validate_columns({"value": "string", name: kind} if name != "value" else {"value": kind})


def test_a_routing_key_is_needed_from_the_option_or_a_column():
    with pytest.raises(SafeBunnyOptionError, match="needs a routing key.*'routingKey'"):
        plan_sink(_sink({**OPTS, "routingKey": None}), {"value": "binary"})
    plan = plan_sink(_sink({**OPTS, "routingKey": None}), {"value": "binary", "routingKey": "string"})
    assert plan.options.routing_key is None


# -- ids -------------------------------------------------------------------------------
def test_message_id_column_wins():
    msg = builder().build(b"x", timestamp=1, message_id_="m-1", causation_id="c-1")
    assert msg.message_id == msg.properties.message_id == "m-1"


def _caused(body, cause, node="billing.InvoiceCreated", slot_type="message", row_type=None,
            routing_key="billing.InvoiceCreated", content_type="application/octet-stream"):
    return caused_id(cause, node, slot_type, body, None, [], content_type, row_type, "safebunny", routing_key)


def test_causation_rule_with_output_index_is_safebunny_message_id():
    b = builder({"value": "binary", "causationId": "string", "outputIndex": "bigint"})
    ids = [b.build(b"x%d" % i, timestamp=1, causation_id="order-1", output_index=i).message_id for i in (2, 0, 1)]
    assert ids == [message_id("order-1", "billing.InvoiceCreated", "message", i) for i in (2, 0, 1)]


def test_causation_rule_without_index_comes_from_the_content():
    b = builder()
    ids = [b.build(b"x%d" % i, timestamp=1, causation_id="order-1").message_id for i in range(3)]
    assert ids == [_caused(b"x%d" % i, "order-1") for i in range(3)]
    assert len(set(ids)) == 3
    assert b.build(b"x0", timestamp=1, causation_id="order-2").message_id == _caused(b"x0", "order-2")


def test_s2_a_causes_outputs_keep_their_ids_across_partitions_and_row_orders():
    """S2 (the audit's e11): the index came from arrival order within a task, so two outputs of one cause
    in different partitions got the same id, and a retry seeing another order swapped the ids."""
    outputs = [b"line A", b"line B", b"line C"]
    one_task = builder(scope="batch:7/partition:0")
    together = {v: one_task.build(v, timestamp=0, causation_id="order-1").message_id for v in outputs}
    split = {v: builder(scope=f"batch:7/partition:{i}").build(v, timestamp=0, causation_id="order-1").message_id
             for i, v in enumerate(outputs)}
    retry = builder(scope="batch:7/partition:0")
    reordered = {v: retry.build(v, timestamp=0, causation_id="order-1").message_id for v in reversed(outputs)}
    assert together == split == reordered
    assert len(set(together.values())) == 3


def test_identical_outputs_of_one_cause_are_one_message_and_are_counted():
    b = builder()
    first = b.build(b"same", timestamp=1, causation_id="c").message_id
    assert b.build(b"same", timestamp=2, causation_id="c").message_id == first
    assert b.repeated_outputs == 1


def test_causation_rule_node_and_type_from_options_and_columns():
    cols = {"value": "binary", "type": "string", "routingKey": "string", "outputIndex": "int"}
    b = builder(cols, node="billing", type="Invoice")
    assert (b.build(b"x", timestamp=1, causation_id="c", output_index=0).message_id
            == message_id("c", "billing", "Invoice", 0))
    assert (b.build(b"x", timestamp=1, causation_id="c", message_type="Refund", output_index=0).message_id
            == message_id("c", "billing", "Refund", 0))
    assert b.build(b"x", timestamp=1, causation_id="c").message_id == _caused(
        b"x", "c", node="billing", slot_type="Invoice", row_type="Invoice")
    b2 = builder({"value": "binary", "routingKey": "string"})
    assert (b2.build(b"x", timestamp=1, causation_id="c", routing_key="shipping.Ship").message_id
            == _caused(b"x", "c", node="shipping.Ship", routing_key="shipping.Ship"))


@pytest.mark.parametrize(
    "rows, words",
    [
        ([dict(causation_id=None, output_index=0)], ["outputIndex (0) but no causationId"]),
        ([dict(causation_id="c", output_index=-1)], ["outputIndex -1", ">= 0"]),
        ([dict(value=b"a", causation_id="c", output_index=1), dict(value=b"b", causation_id="c", output_index=1)],
         ["outputIndex 1 for causationId 'c'", "different content", "its own outputIndex"]),
    ],
)
def test_bad_output_indexes_fail_the_task(rows, words):
    b = builder({"value": "binary", "causationId": "string", "outputIndex": "int"})
    with pytest.raises(SafeBunnyOptionError) as info:
        for row in rows:
            b.build(row.pop("value", b"v"), timestamp=1, **row)
    assert info.value.option == "outputIndex"
    for word in words:
        assert word in str(info.value)


def test_the_same_output_index_with_the_same_content_is_the_same_message():
    b = builder({"value": "binary", "causationId": "string", "outputIndex": "int"})
    a = b.build(b"v", timestamp=1, causation_id="c", output_index=3).message_id
    assert b.build(b"v", timestamp=2, causation_id="c", output_index=3).message_id == a


def test_content_rule_counts_identical_rows_and_matches_content_id():
    b = builder()
    a1 = b.build(b"same", timestamp=1)
    a2 = b.build(b"same", timestamp=2)
    assert a1.message_id != a2.message_id
    assert a1.message_id == content_id("batch:0/partition:0", b"same", None, [], "application/octet-stream",
                                       None, "safebunny", "billing.InvoiceCreated", 0)


def test_content_rule_is_independent_of_row_order():
    rows = [b"a", b"b", b"a", b"c", b"a"]
    b1, b2 = builder(), builder()
    first = {b1.build(r, timestamp=1).message_id for r in rows}
    second = {b2.build(r, timestamp=9).message_id for r in reversed(rows)}
    assert first == second and len(first) == len(rows)


def test_content_rule_depends_on_scope_and_on_every_content_field():
    base = builder().build(b"v", timestamp=1).message_id
    assert builder(scope="batch:1/partition:0").build(b"v", timestamp=1).message_id != base
    assert builder(scope="batch:0/partition:1").build(b"v", timestamp=1).message_id != base
    variants = [
        dict(correlation_id="c"), dict(headers={"k": "v"}), dict(content_type="application/json"),
        dict(message_type="T"), dict(exchange="other"), dict(routing_key="other"),
    ]
    for extra in variants:
        assert builder().build(b"v", timestamp=1, **extra).message_id != base, extra


def test_headers_as_arrow_pairs_or_dict_give_the_same_id():
    a = builder().build(b"v", timestamp=1, headers=[("b", "2"), ("a", "1")]).message_id
    assert a == builder().build(b"v", timestamp=1, headers={"a": "1", "b": "2"}).message_id


def test_fast_uuid5_equals_the_standard_one():
    for name in ["", "x", "safebunny.content.v1|3:abc", "ünïcode" * 20]:
        assert outgoing._uuid5(name) == str(uuid.uuid5(NAMESPACE, name))


@given(st.lists(st.tuples(st.binary(max_size=4), st.sampled_from([None, "c1", "c2"]),
                          st.sampled_from([None, "k1", "k2"])), max_size=60))
def test_ids_repeat_only_for_identical_outputs_of_one_cause(rows):
    b = builder({"value": "binary", "routingKey": "string"})
    ids = [b.build(v, timestamp=1, causation_id=c, routing_key=k).message_id for v, c, k in rows]
    distinct = {(v, c, k) for v, c, k in rows if c is not None}  # uncaused identical rows get distinct ids
    assert len(set(ids)) == len(distinct) + sum(1 for _, c, _ in rows if c is None)


@given(st.lists(st.tuples(st.binary(max_size=3), st.sampled_from(["c1", "c2"])), max_size=30, unique=True),
       st.randoms(use_true_random=False), st.integers(1, 4))
def test_caused_ids_do_not_depend_on_partitioning_or_order(rows, rnd, parts):
    reference = {row: builder().build(row[0], timestamp=1, causation_id=row[1]).message_id for row in rows}
    shuffled = list(rows)
    rnd.shuffle(shuffled)
    builders = [builder(scope=f"batch:3/partition:{p}") for p in range(parts)]
    got = {row: builders[rnd.randrange(parts)].build(row[0], timestamp=9, causation_id=row[1]).message_id
           for row in shuffled}
    assert got == reference and len(set(got.values())) == len(rows)


# -- properties ------------------------------------------------------------------------
def test_properties_persistent_ids_headers_type_timestamp():
    msg = builder().build(b"v", timestamp=1700000000, correlation_id="corr", causation_id="cause",
                          headers={"tenant": "t1"}, content_type="application/json", message_type="Invoice")
    p = msg.properties
    assert p.delivery_mode == 2
    assert p.correlation_id == "corr"
    assert p.headers == {"tenant": "t1", CAUSATION_HEADER: "cause"}
    assert (p.content_type, p.type, p.timestamp) == ("application/json", "Invoice", 1700000000)
    assert (msg.exchange, msg.routing_key, msg.body) == ("safebunny", "billing.InvoiceCreated", b"v")


def test_correlation_id_is_inherited_from_the_cause_else_the_message_itself():
    assert builder().build(b"v", timestamp=1, causation_id="cause").properties.correlation_id == "cause"
    msg = builder().build(b"v", timestamp=1)
    assert msg.properties.correlation_id == msg.message_id
    assert msg.properties.headers is None


def test_content_type_defaults():
    assert builder().build(b"v", timestamp=1).properties.content_type == "application/octet-stream"
    text = builder({"value": "string"}).build("héllo", timestamp=1)
    assert text.properties.content_type == "text/plain; charset=utf-8" and text.body == "héllo".encode()
    assert builder(contentType="application/json").build(b"{}", timestamp=1).properties.content_type == (
        "application/json")


def test_row_columns_override_exchange_and_routing_key():
    msg = builder({"value": "binary", "exchange": "string", "routingKey": "string"}).build(
        b"v", timestamp=1, exchange="", routing_key="q1")
    assert (msg.exchange, msg.routing_key) == ("", "q1")


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(value=None), ["null 'value'", "never drops"]),
        (dict(value=b"v", message_id_=""), ["empty 'messageId'"]),
        (dict(value=b"v", causation_id=""), ["empty 'causationId'"]),
    ],
)
def test_bad_rows_fail_loudly(kwargs, words):
    with pytest.raises(SafeBunnyOptionError) as info:
        builder().build(timestamp=1, **kwargs)
    for word in words:
        assert word in str(info.value)


def test_null_routing_key_without_option_fails():
    b = MessageBuilder(plan_sink(_sink({**OPTS, "routingKey": None}), {"value": "binary", "routingKey": "string"}), "s")
    with pytest.raises(SafeBunnyOptionError, match="null 'routingKey'"):
        b.build(b"v", timestamp=1, routing_key=None)
