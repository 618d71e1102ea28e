"""Which broker a command talks to, and with which password.

``--uri``, else ``SAFEBUNNY_URI``, else the saga's own; the password from ``SAFEBUNNY_PASSWORD``, else the
URI, else a prompt that does not echo (docs/operations.md, "Command line"). The password is never printed
or logged: every message goes through :func:`safebunny.uri.redact`.
"""

from __future__ import annotations

import getpass
import sys
from collections.abc import Callable, Mapping
from urllib.parse import urlsplit

from safebunny.cli.exits import USAGE, CliError
from safebunny.errors import SafeBunnyOptionError
from safebunny.uri import redact, validate_uri, with_password

__all__ = ["resolve_uri"]


def resolve_uri(cli_uri: str | None, env: Mapping[str, str], saga_uri: str | None,
                prompt: Callable[[str], str] | None = None, interactive: bool | None = None) -> str:
    """The URI to use, with its password filled in (see the module docstring)."""
    uri = cli_uri or env.get("SAFEBUNNY_URI") or saga_uri
    if not uri:
        raise CliError("no broker URI: pass --uri amqp://user@host:5672/%2F or set SAFEBUNNY_URI", USAGE)
    source = "--uri" if cli_uri else ("SAFEBUNNY_URI" if env.get("SAFEBUNNY_URI") else "the saga's uri")
    try:
        validate_uri(uri, source)
    except SafeBunnyOptionError as exc:
        raise CliError(str(exc), USAGE) from None
    password = env.get("SAFEBUNNY_PASSWORD")
    if password:
        return with_password(uri, password)
    parts = urlsplit(uri)
    if parts.username and parts.password is None:
        if interactive is None:
            interactive = sys.stdin.isatty()
        if not interactive:
            raise CliError(f"{redact(uri)} names user {parts.username!r} but no password, and there is no terminal "
                           "to ask: set SAFEBUNNY_PASSWORD", USAGE)
        ask = prompt or getpass.getpass
        return with_password(uri, ask(f"password for {parts.username}@{parts.hostname}: "))
    return uri
