import pytest

from safebunny.errors import SafeBunnyOptionError
from safebunny.options.sink import SINK_OPTIONS, parse_sink_options, sink_options_table

URI = "amqp://guest:guest@localhost:5672/%2F"


def test_defaults():
    got = parse_sink_options({"uri": URI, "routingKey": "billing.InvoiceCreated"})
    assert got == {
        "uri": URI, "exchange": "", "routingKey": "billing.InvoiceCreated", "node": None, "type": None,
        "contentType": None, "maxInFlight": 1000, "confirmTimeoutMs": 30000, "heartbeatSeconds": 30,
        "connectTimeoutMs": 10000, "connectionName": None, "logLevel": None,
    }


def test_names_are_case_insensitive_and_spark_options_pass_through():
    got = parse_sink_options({"URI": URI, "EXCHANGE": "safebunny", "routingkey": "a.b", "MAXINFLIGHT": "5",
                              "checkpointLocation": "/tmp/cp", "path": "x"})
    assert (got["exchange"], got["routingKey"], got["maxInFlight"]) == ("safebunny", "a.b", 5)
    assert "checkpointLocation" not in got and "path" not in got


def test_empty_exchange_is_the_default_exchange():
    assert parse_sink_options({"uri": URI, "exchange": ""})["exchange"] == ""


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
    table = sink_options_table()
    for spec in SINK_OPTIONS:
        assert f"| `{spec.name}` |" in table
    assert "(required)" in table
