import pytest

from safebunny.errors import SafeBunnyOptionError
from safebunny.options import options_table
from safebunny.options.connection import ConnectionSettings
from safebunny.options.sink import SINK_OPTIONS, SinkOptions, parse_sink_options

URI = "amqp://guest:guest@localhost:5672/%2F"


def test_defaults():
    got = parse_sink_options({"uri": URI, "routingKey": "billing.InvoiceCreated"})
    assert got == SinkOptions(
        connection=ConnectionSettings(uri=URI, connection_name=None, log_level=None), exchange="",
        routing_key="billing.InvoiceCreated", node=None, type=None, content_type=None, max_in_flight=1000,
        confirm_timeout_ms=30000, heartbeat_seconds=30, connect_timeout_ms=10000,
    )
    assert got.connection.login_uri == URI


def test_the_typed_options_render_back():
    """SinkOptions renders back to the strings Spark passes: what the saga and the step's emits build instead of
    option strings (the table is derived from its fields)."""
    options = SinkOptions(connection=ConnectionSettings("amqp://app:s3cret@h/%2F", connection_name="c"), exchange="x",
                          routing_key="a.b", max_in_flight=5)
    assert options.spark_options() == {"uri": "amqp://app@h/%2F", "password": "s3cret", "connectionName": "c",
                                       "exchange": "x", "routingKey": "a.b", "maxInFlight": "5"}
    assert parse_sink_options(options.spark_options()) == options
    assert "s3cret" not in repr(options)


def test_names_are_case_insensitive_and_spark_options_pass_through():
    got = parse_sink_options({"URI": URI, "EXCHANGE": "safebunny", "routingkey": "a.b", "MAXINFLIGHT": "5",
                              "checkpointLocation": "/tmp/cp", "path": "x"})
    assert (got.exchange, got.routing_key, got.max_in_flight) == ("safebunny", "a.b", 5)
    assert not hasattr(got, "checkpoint_location") and not hasattr(got, "path")


def test_empty_exchange_is_the_default_exchange():
    assert parse_sink_options({"uri": URI, "exchange": ""}).exchange == ""


@pytest.mark.parametrize(
    "raw, option, words",
    [
        ({}, "uri", ["'uri' is required"]),
        ({"uri": "http://h/"}, "uri", ["'amqp://' or 'amqps://'", "'http://h/'"]),
        ({"uri": URI, "routeKey": "x"}, "routeKey", ["Unknown option 'routeKey'", "Did you mean 'routingKey'",
                                                     "Valid options:"]),
        ({"uri": URI, "maxInFlight": "0"}, "maxInFlight", ["'maxInFlight'", "at least 1", "got 0"]),
        ({"uri": URI, "maxInFlight": "many"}, "maxInFlight", ["'maxInFlight'", "integer", "'many'"]),
        ({"uri": URI, "maxInFlight": "70000"}, "maxInFlight", ["at most 65535"]),
        ({"uri": URI, "confirmTimeoutMs": "30s"}, "confirmTimeoutMs", ["'confirmTimeoutMs'", "'30s'"]),
        ({"uri": URI, "heartbeatSeconds": "-1"}, "heartbeatSeconds", ["at least 0"]),
        ({"uri": URI, "routingKey": ""}, "routingKey", ["'routingKey'", "non-empty"]),
        ({"uri": URI, "node": ""}, "node", ["'node'", "non-empty"]),
    ],
)
def test_bad_options_name_the_option_quote_the_value(raw, option, words):
    with pytest.raises(SafeBunnyOptionError) as info:
        parse_sink_options(raw)
    assert info.value.option == option
    for word in words:
        assert word in str(info.value)


def test_password_never_in_errors():
    with pytest.raises(SafeBunnyOptionError) as info:
        parse_sink_options({"uri": "http://u:hunter2@h/"})
    assert "hunter2" not in str(info.value)


def test_table_lists_every_option():
    table = options_table(SINK_OPTIONS)
    for spec in SINK_OPTIONS:
        assert f"| `{spec.name}` |" in table
    assert "(required)" in table
