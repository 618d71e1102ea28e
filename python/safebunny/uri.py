"""AMQP URIs: validation, redaction and conversion to pika connection parameters."""

from __future__ import annotations

import re
import ssl
from urllib.parse import unquote, urlsplit

from safebunny.errors import SafeBunnyOptionError

__all__ = ["redact", "validate_uri", "connection_parameters", "describe", "with_password"]

_USERINFO = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<user>[^:@/]*):(?P<pw>[^@/]*)@")


def redact(text: str) -> str:
    """Replace the password of every URI in ``text`` with ``***``.

    >>> redact("amqp://guest:secret@host:5672/%2F")
    'amqp://guest:***@host:5672/%2F'
    """
    return _USERINFO.sub(lambda m: f"{m['scheme']}{m['user']}:***@", text)


def validate_uri(uri: str, option: str = "uri") -> str:
    """Check that ``uri`` is an ``amqp://`` or ``amqps://`` URI and return it unchanged."""
    if not isinstance(uri, str) or not uri.strip():
        raise SafeBunnyOptionError(
            f"Option '{option}' is required: set it to an AMQP URI such as "
            "'amqp://user:password@host:5672/%2F'.",
            option,
        )
    parts = urlsplit(uri)
    if parts.scheme not in ("amqp", "amqps"):
        raise SafeBunnyOptionError(
            f"Option '{option}' must start with 'amqp://' or 'amqps://', but got {redact(uri)!r}.",
            option,
        )
    if not parts.hostname:
        raise SafeBunnyOptionError(
            f"Option '{option}' has no host: got {redact(uri)!r}; write it as "
            "'amqp://user:password@host:5672/vhost'.",
            option,
        )
    try:
        _ = parts.port
    except ValueError:
        raise SafeBunnyOptionError(
            f"Option '{option}' has an invalid port: got {redact(uri)!r}.", option
        ) from None
    return uri


def connection_parameters(uri: str, heartbeat: int | None = None, **overrides: object):  # type: ignore[no-untyped-def]
    """Build :class:`pika.URLParameters` from ``uri``.

    ``amqps://`` URIs get a default TLS context (system CAs, hostname checked) unless the
    URI's query string already configures one (pika's ``ssl_options``).
    """
    import pika

    validate_uri(uri)
    params = pika.URLParameters(uri)
    if urlsplit(uri).scheme == "amqps" and params.ssl_options is None:
        context = ssl.create_default_context()
        params.ssl_options = pika.SSLOptions(context, urlsplit(uri).hostname)
    if heartbeat is not None:
        params.heartbeat = heartbeat
    for key, value in overrides.items():
        setattr(params, key, value)
    return params


def describe(uri: str) -> str:
    """A short, password-free description of the endpoint: ``host:port/vhost``."""
    parts = urlsplit(uri)
    port = parts.port or (5671 if parts.scheme == "amqps" else 5672)
    vhost = unquote(parts.path[1:]) if len(parts.path) > 1 else "/"
    return f"{parts.hostname}:{port} vhost {vhost!r}"


def with_password(uri: str, password: str | None) -> str:
    """``uri`` with its password replaced by ``password`` (URL-quoted); unchanged when None.

    The ``password`` option exists because Spark prints data source options in query plans
    and redacts only keys that look secret (``password``, ``url``, ...), not ``uri``.
    """
    from urllib.parse import quote, urlsplit, urlunsplit

    if password is None:
        return uri
    parts = urlsplit(uri)
    user = parts.username or "guest"
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    netloc = f"{quote(user, safe='')}:{quote(password, safe='')}@{host}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
