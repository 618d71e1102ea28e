import pytest

from safebunny.errors import SafeBunnyOptionError
from safebunny.options import (
    OptionSpec,
    options_table,
    parse_bool,
    parse_choice,
    parse_int,
    parse_options,
    parse_str,
)

SPECS = (
    OptionSpec("uri", parse_str, required=True, doc="the broker's AMQP URI."),
    OptionSpec("maxMessagesPerTrigger", parse_int(1), default=None, doc="cap per batch."),
    OptionSpec("failOnDataLoss", parse_bool, default=True, doc="fail on loss."),
    OptionSpec("startingOffsets", parse_choice("earliest", "latest"), default="latest"),
)


def test_names_are_case_insensitive_and_canonicalised():
    got = parse_options({"URI": "amqp://h", "maxmessagespertrigger": "10", "FAILONDATALOSS": "FALSE"},
                        SPECS, role="source")
    assert got == {"uri": "amqp://h", "maxMessagesPerTrigger": 10, "failOnDataLoss": False,
                   "startingOffsets": "latest"}


def test_spark_options_pass_through():
    got = parse_options({"uri": "amqp://h", "path": "/x", "checkpointLocation": "/c"}, SPECS, role="source")
    assert "path" not in got


@pytest.mark.parametrize(
    "raw, words",
    [
        ({}, ["'uri' is required", "AMQP URI"]),
        ({"uri": "amqp://h", "maxMessagePerTrigger": "1"}, ["Unknown option 'maxMessagePerTrigger'",
                                                            "Did you mean 'maxMessagesPerTrigger'"]),
        ({"uri": "amqp://h", "maxmessagespertriger": "1"}, [  # as Spark hands it over: lower case
            "Unknown option 'maxmessagespertriger' (Spark passes option names in lower case)",
            "Did you mean 'maxMessagesPerTrigger'"]),
        ({"uri": "amqp://h", "maxMessagesPerTrigger": "ten"}, ["'maxMessagesPerTrigger'", "'ten'", "integer"]),
        ({"uri": "amqp://h", "maxMessagesPerTrigger": "0"}, ["at least 1", "got 0"]),
        ({"uri": "amqp://h", "failOnDataLoss": "yes"}, ["'failOnDataLoss'", "'true' or 'false'", "'yes'"]),
        ({"uri": "amqp://h", "startingOffsets": "first"}, ["'earliest', 'latest'", "'first'"]),
        ({"uri": "amqp://h", "zzzzzz": "1"}, ["Unknown option 'zzzzzz'", "Valid options:"]),
    ],
)
def test_bad_options_say_what_which_and_what_to_do(raw, words):
    with pytest.raises(SafeBunnyOptionError) as info:
        parse_options(raw, SPECS, role="source")
    for word in words:
        assert word in str(info.value)


def test_values_with_passwords_are_redacted_in_errors():
    with pytest.raises(SafeBunnyOptionError) as info:
        parse_bool("flag", "amqp://u:hunter2@h/")
    assert "hunter2" not in str(info.value)


def test_int_maximum():
    with pytest.raises(SafeBunnyOptionError, match="at most 5"):
        parse_int(1, 5)("n", "6")


def test_options_table_lists_every_option():
    table = options_table(SPECS)
    for spec in SPECS:
        assert f"`{spec.name}`" in table
    assert "(required)" in table
