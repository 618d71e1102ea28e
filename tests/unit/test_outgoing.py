import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from safebunny.amqp import outgoing
from safebunny.amqp.outgoing import (
    ACCEPTED_COLUMNS,
    CAUSATION_HEADER,
    MessageBuilder,
    content_id,
    plan_sink,
    validate_columns,
)
from safebunny.errors import SafeBunnyOptionError
from safebunny.ids import NAMESPACE, message_id

OPTS = {"exchange": "safebunny", "routingKey": "billing.InvoiceCreated", "node": None, "type": None,
        "contentType": None}


def builder(columns=None, scope="batch:0/partition:0", **options):
    return MessageBuilder(plan_sink({**OPTS, **options}, columns or {"value": "binary"}), scope)


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
        plan_sink({**OPTS, "routingKey": None}, {"value": "binary"})
    plan = plan_sink({**OPTS, "routingKey": None}, {"value": "binary", "routingKey": "string"})
    assert plan.routing_key is None


# -- ids -------------------------------------------------------------------------------
def test_message_id_column_wins():
    msg = builder().build(b"x", timestamp=1, message_id_="m-1", causation_id="c-1")
    assert msg.message_id == msg.properties.message_id == "m-1"


def test_causation_rule_is_safebunny_message_id_with_occurrence_index():
    b = builder()
    ids = [b.build(b"x%d" % i, timestamp=1, causation_id="order-1").message_id for i in range(3)]
    assert ids == [message_id("order-1", "billing.InvoiceCreated", "message", i) for i in range(3)]
    other = b.build(b"y", timestamp=1, causation_id="order-2").message_id
    assert other == message_id("order-2", "billing.InvoiceCreated", "message", 0)


def test_causation_rule_node_and_type_from_options_and_columns():
    b = builder({"value": "binary", "type": "string", "routingKey": "string"}, node="billing", type="Invoice")
    assert b.build(b"x", timestamp=1, causation_id="c").message_id == message_id("c", "billing", "Invoice", 0)
    assert (b.build(b"x", timestamp=1, causation_id="c", message_type="Refund").message_id
            == message_id("c", "billing", "Refund", 0))
    assert b.build(b"x", timestamp=1, causation_id="c").message_id == message_id("c", "billing", "Invoice", 1)
    b2 = builder({"value": "binary", "routingKey": "string"})
    assert (b2.build(b"x", timestamp=1, causation_id="c", routing_key="shipping.Ship").message_id
            == message_id("c", "shipping.Ship", "message", 0))


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
def test_ids_never_repeat_within_a_task(rows):
    b = builder({"value": "binary", "routingKey": "string"})
    ids = [b.build(v, timestamp=1, causation_id=c, routing_key=k).message_id for v, c, k in rows]
    assert len(set(ids)) == len(ids)


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
    b = MessageBuilder(plan_sink({**OPTS, "routingKey": None}, {"value": "binary", "routingKey": "string"}), "s")
    with pytest.raises(SafeBunnyOptionError, match="null 'routingKey'"):
        b.build(b"v", timestamp=1, routing_key=None)
