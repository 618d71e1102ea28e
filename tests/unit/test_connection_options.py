"""The connection options (``uri``, ``password``) that the source and the sink share."""

import pytest

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
    assert options["uri"] == expected
    assert "password" not in options


@pytest.mark.parametrize("parse, required", ROLES, ids=["source", "sink"])
def test_without_password_option_the_uri_is_kept(parse, required):
    assert parse({"uri": "amqp://a:b@h/%2F", **required})["uri"] == "amqp://a:b@h/%2F"
