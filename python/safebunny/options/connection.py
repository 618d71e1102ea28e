"""The options every safebunny role shares: where the broker is and how to log in."""

from __future__ import annotations

from typing import Any

from safebunny.options import OptionSpec, parse_str
from safebunny.uri import validate_uri, with_password

__all__ = ["CONNECTION_OPTIONS", "apply_password"]


def _uri(name: str, raw: str) -> str:
    return validate_uri(raw, name)


CONNECTION_OPTIONS: tuple[OptionSpec, ...] = (
    OptionSpec("uri", _uri, required=True, values="`amqp://` or `amqps://` URI",
               doc="The broker, e.g. `amqp://user:password@host:5672/%2F`. The password is never logged."),
    OptionSpec("password", parse_str, values="string",
               doc="The broker password, replacing the one in `uri`. Prefer it to a password inside `uri`: "
                   "Spark redacts an option named `password` in query plans, not one inside `uri`."),
)


def apply_password(options: dict[str, Any]) -> dict[str, Any]:
    """Fold the parsed ``password`` option into ``uri`` (in place) and return ``options``."""
    options["uri"] = with_password(options["uri"], options.pop("password"))
    return options
