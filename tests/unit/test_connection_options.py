"""The connection options (``uri``, ``password``) that the source and the sink share."""

import logging

import pytest

from safebunny.errors import SafeBunnyOptionError
from safebunny.options.sink import parse_sink_options
from safebunny.options.source import parse_source_options

ROLES = [(parse_source_options, {"queue": "q"}), (parse_sink_options, {"routingKey": "q"})]


@pytest.mark.parametrize("parse, required", ROLES, ids=["source", "sink"])
@pytest.mark.parametrize(
    "uri, password, expected",
    [
        ("amqp://app@h/%2F", "s3cret", "amqp://app:s3cret@h/%2F"),
        ("amqp://app:old@h:5672/%2F", "n3w/p@ss", "amqp://app:n3w%2Fp%40ss@h:5672/%2F"),
    ],
)
def test_password_option_replaces_the_uri_password(parse, required, uri, password, expected):
    options = parse({"uri": uri, "password": password, **required})
    assert options.connection.login_uri == expected
    assert password not in repr(options) and password not in options.connection.uri


@pytest.mark.parametrize("parse, required", ROLES, ids=["source", "sink"])
def test_without_password_option_the_uri_is_kept(parse, required):
    assert parse({"uri": "amqp://a:b@h/%2F", **required}).connection.login_uri == "amqp://a:b@h/%2F"


def test_log_level_option_sets_the_level_where_the_options_are_parsed() -> None:
    logger = logging.getLogger("safebunny")
    before = logger.level
    try:
        parse_sink_options({"uri": "amqp://h/%2F", "routingKey": "k", "logLevel": "info"})
        assert logger.level == logging.INFO
        parse_source_options({"uri": "amqp://h/%2F", "queue": "q", "logLevel": "DEBUG"})
        assert logger.level == logging.DEBUG
        with pytest.raises(SafeBunnyOptionError, match="logLevel"):
            parse_sink_options({"uri": "amqp://h/%2F", "routingKey": "k", "logLevel": "LOUD"})
    finally:
        logger.setLevel(before)


def test_the_driver_s_log_level_travels_in_the_options(monkeypatch) -> None:
    from safebunny.spark.session import _options

    monkeypatch.delenv("SAFEBUNNY_LOG_LEVEL", raising=False)
    assert _options({"queue": "q", "maxMessagesPerTrigger": 5}) == {"queue": "q", "maxMessagesPerTrigger": "5"}
    monkeypatch.setenv("SAFEBUNNY_LOG_LEVEL", "info")
    assert _options({"queue": "q"}) == {"queue": "q", "logLevel": "INFO"}
    assert _options({"queue": "q", "logLevel": "ERROR"})["logLevel"] == "ERROR"  # given: kept
    monkeypatch.setenv("SAFEBUNNY_LOG_LEVEL", "chatty")  # not a level: nothing added
    assert "logLevel" not in _options({"queue": "q"})


def test_a_password_inside_uri_travels_in_the_password_option(monkeypatch) -> None:
    from safebunny.spark.session import _options

    monkeypatch.delenv("SAFEBUNNY_LOG_LEVEL", raising=False)
    assert _options({"URI": "amqp://app:s%2Fx@h:5672/%2F", "queue": "q"}) == {
        "URI": "amqp://app@h:5672/%2F", "queue": "q", "password": "s/x"}
    given = {"uri": "amqp://app:old@h/%2F", "Password": "new"}  # the password given apart wins; the URI's goes
    assert _options(given) == {"uri": "amqp://app@h/%2F", "Password": "new"}
    assert _options({"uri": "amqp://app@h/%2F"}) == {"uri": "amqp://app@h/%2F"}
