"""Validating and redacting AMQP URIs, and turning them into pika connection parameters."""

from __future__ import annotations

import re
import ssl
from urllib.parse import quote, unquote, urlsplit, urlunsplit

from safebunny.errors import SafeBunnyOptionError

__all__ = ["redact", "without_userinfo", "validate_uri", "connection_parameters", "describe", "with_password",
           "split_password"]

# A URI's userinfo runs to the LAST '@' of its whitespace-free token: a password may hold an
# unencoded '/' or '@' (then the URI is invalid, and its error message must still hide it).
_USERINFO = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<userinfo>\S*)@")


def _hide_password(match: re.Match[str]) -> str:
    userinfo = match["userinfo"]
    if ":" not in userinfo:
        return match[0]
    return f"{match['scheme']}{userinfo.split(':', 1)[0]}:***@"


def redact(text: str) -> str:
    """Replace the password of every URI in ``text`` with ``***`` (the user name stays).

    The userinfo is taken up to the last ``@`` of the URI, so a password with an unencoded
    ``/`` or ``@`` is hidden too (an ``@`` later in the path hides more than needed, never less).

    >>> redact("amqp://guest:secret@host:5672/%2F")
    'amqp://guest:***@host:5672/%2F'
    >>> redact("amqp://app:s3cr/et@host/%2F")
    'amqp://app:***@host/%2F'
    """
    return _USERINFO.sub(_hide_password, text)


def without_userinfo(uri: str) -> str:
    """``uri`` with its whole userinfo (user and password) replaced by ``***``, for error messages.

    >>> without_userinfo("amqp://app:p@ss/word@rabbit:5672/%2F")
    'amqp://***@rabbit:5672/%2F'
    """
    scheme, sep, rest = uri.partition("://")
    if not sep:
        return redact(uri)
    at = rest.rfind("@")  # the last '@': an '@' in the path hides more than needed, never less
    return uri if at < 0 else f"{scheme}://***@{rest[at + 1:]}"


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
            f"Option '{option}' must start with 'amqp://' or 'amqps://', but got {without_userinfo(uri)!r}.",
            option,
        )
    if "@" not in parts.netloc and "@" in uri.partition("://")[2]:
        raise SafeBunnyOptionError(
            f"Option '{option}' has a '/', '?' or '#' before its '@': got {without_userinfo(uri)!r}. A user name "
            "or password with such characters (or '@' or ':') must be percent-encoded ('/' is %2F, '@' is %40, "
            "':' is %3A), or pass the password with the 'password' option instead.",
            option,
        )
    if not parts.hostname:
        raise SafeBunnyOptionError(
            f"Option '{option}' has no host: got {without_userinfo(uri)!r}; write it as "
            "'amqp://user:password@host:5672/vhost'.",
            option,
        )
    try:
        _ = parts.port
    except ValueError:
        raise SafeBunnyOptionError(
            f"Option '{option}' has an invalid port: got {without_userinfo(uri)!r}.", option
        ) from None
    if parts.query:
        _check_query(uri, option)
    return uri


def _check_query(uri: str, option: str) -> None:
    """The URI's query parameters (``heartbeat``, ``channel_max``, ...) as pika reads them, checked now:
    a bad one would otherwise surface as a bare ``ValueError`` at the first connection."""
    import pika

    try:
        pika.URLParameters(uri)
    except (ValueError, TypeError) as exc:
        raise SafeBunnyOptionError(
            f"Option '{option}' has an invalid query parameter ({redact(str(exc))}): got {without_userinfo(uri)!r}. "
            "Fix or remove it (see pika's URLParameters for the names and values it takes).", option
        ) from None


def connection_parameters(uri: str, heartbeat: int | None = None, **overrides: object):  # type: ignore[no-untyped-def]
    """Build :class:`pika.URLParameters` from ``uri``.

    ``amqps://`` URIs get a default TLS context (system CAs, hostname checked) unless the
    URI's query string already configures one (pika's ``ssl_options``).
    """
    import pika

    validate_uri(uri)
    params = pika.URLParameters(uri)
    if urlsplit(uri).scheme == "amqps" and params.ssl_options is None:
        params.ssl_options = pika.SSLOptions(ssl.create_default_context(), urlsplit(uri).hostname)
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
    """``uri`` with its password replaced by ``password`` (URL-quoted); unchanged when None. Why the
    ``password`` option exists: docs/source.md, Passwords."""
    if password is None:
        return uri
    parts = urlsplit(uri)
    user = parts.username or "guest"
    host = parts.netloc.rpartition("@")[2]  # host and port as written
    netloc = f"{quote(user, safe='')}:{quote(password, safe='')}@{host}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def split_password(uri: str, given: str | None = None) -> tuple[str, str | None]:
    """``uri`` without its password, and the password to pass apart as the ``password`` option, which Spark
    redacts in plans (docs/source.md, Passwords): ``given`` when it is not None (a password given apart
    replaces the one inside the URI), else the URI's own (decoded; ``None`` when the URI has none).

    >>> split_password("amqp://app:s%2Fx@host:5672/%2F")
    ('amqp://app@host:5672/%2F', 's/x')
    >>> split_password("amqp://app:old@host/%2F", "new")
    ('amqp://app@host/%2F', 'new')
    """
    parts = urlsplit(uri)
    if parts.password is None:
        return uri, given
    host = parts.netloc.rpartition("@")[2]
    user = parts.netloc.rpartition("@")[0].partition(":")[0]
    netloc = f"{user}@{host}" if user else host
    bare = urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    return bare, given if given is not None else unquote(parts.password)
