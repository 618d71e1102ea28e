import pytest

from safebunny.errors import SafeBunnyOptionError
from safebunny.uri import connection_parameters, describe, redact, validate_uri


@pytest.mark.parametrize(
    "text, expected",
    [
        ("amqp://guest:secret@host:5672/%2F", "amqp://guest:***@host:5672/%2F"),
        ("failed amqps://u:p%40ss@h/v and amqp://a:b@c", "failed amqps://u:***@h/v and amqp://a:***@c"),
        ("amqp://host:5672/", "amqp://host:5672/"),
    ],
)
def test_redact(text, expected):
    assert redact(text) == expected


@pytest.mark.parametrize(
    "uri, words",
    [
        ("", ["'uri' is required"]),
        ("http://u:secret@h/", ["'amqp://' or 'amqps://'", "u:***@h"]),
        ("amqp://u:secret@:5672/", ["no host"]),
        ("amqp://u:secret@h:notaport/", ["invalid port"]),
    ],
)
def test_validate_uri_errors_never_show_the_password(uri, words):
    with pytest.raises(SafeBunnyOptionError) as info:
        validate_uri(uri)
    for word in words:
        assert word in str(info.value)
    assert "secret" not in str(info.value)


def test_amqps_gets_a_tls_context():
    params = connection_parameters("amqps://u:p@broker.example:5671/%2F")
    assert params.ssl_options is not None
    assert params.port == 5671


def test_describe_has_no_password():
    assert describe("amqp://u:p@h:1234/%2Fv") == "h:1234 vhost '/v'"
