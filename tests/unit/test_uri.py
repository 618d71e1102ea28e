import pytest

from safebunny.errors import SafeBunnyOptionError
from safebunny.uri import connection_parameters, describe, redact, validate_uri, without_userinfo


@pytest.mark.parametrize(
    "text, expected",
    [
        ("amqp://guest:secret@host:5672/%2F", "amqp://guest:***@host:5672/%2F"),
        ("failed amqps://u:p%40ss@h/v and amqp://a:b@c", "failed amqps://u:***@h/v and amqp://a:***@c"),
        ("amqp://host:5672/", "amqp://host:5672/"),
        # An unencoded '/' or '@' in the password ends the userinfo at the last '@'
        ("amqp://app:s3cr/et@rabbit:5672/%2F", "amqp://app:***@rabbit:5672/%2F"),
        ("got 'amqp://app:p@ss@rabbit:badport/%2F'.", "got 'amqp://app:***@rabbit:badport/%2F'."),
        ("amqp://app:s'cr\"t@h/ and amqp://b:c/d@e", "amqp://app:***@h/ and amqp://b:***@e"),
    ],
)
def test_redact(text, expected):
    assert redact(text) == expected


@pytest.mark.parametrize(
    "uri, words",
    [
        ("", ["'uri' is required"]),
        ("http://u:secret@h/", ["'amqp://' or 'amqps://'", "'http://***@h/'"]),
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


@pytest.mark.parametrize(
    "uri, words",
    [  # Passwords with unencoded '/' or '@'
        ("amqp://app:s3cr/et@rabbit:5672/%2F", ["before its '@'", "'amqp://***@rabbit:5672/%2F'", "%2F", "'password'"]),
        ("amqp://app:s3cr/et@rabbit/%2F", ["before its '@'", "'amqp://***@rabbit/%2F'"]),
        ("http://app:s3cr/et@rabbit:5672/%2F", ["'amqp://' or 'amqps://'", "'http://***@rabbit:5672/%2F'"]),
        ("amqp://app:p@ss@rabbit:badport/%2F", ["invalid port", "'amqp://***@rabbit:badport/%2F'"]),
        ("amqp://app:s3cr?et@rabbit:5672/%2F", ["before its '@'"]),
    ],
)
def test_validate_uri_never_echoes_the_userinfo(uri, words):
    with pytest.raises(SafeBunnyOptionError) as info:
        validate_uri(uri)
    text = str(info.value)
    for word in words:
        assert word in text
    for secret in ("s3cr", "et@", "p@ss", "app"):
        assert secret not in text


def test_without_userinfo():
    assert without_userinfo("amqp://u:p@h:1/%2F") == "amqp://***@h:1/%2F"
    assert without_userinfo("amqp://h:1/%2F") == "amqp://h:1/%2F"


def test_amqps_gets_a_tls_context():
    params = connection_parameters("amqps://u:p@broker.example:5671/%2F")
    assert params.ssl_options is not None
    assert params.port == 5671


def test_describe_has_no_password():
    assert describe("amqp://u:p@h:1234/%2Fv") == "h:1234 vhost '/v'"
