"""The options every safebunny role shares: where the broker is and how to log in."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from safebunny.logs import LOG_LEVELS
from safebunny.options import option, option_specs, parse_choice, parse_str, typed
from safebunny.uri import split_password, validate_uri, with_password

__all__ = ["ConnectionSettings", "LogLevel", "CONNECTION_OPTIONS", "connection_settings"]

LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR"]


@dataclass(frozen=True)
class ConnectionSettings:
    """The connection options (:data:`CONNECTION_OPTIONS`), one field each, as a typed value: the one owner of
    the broker's URI, password, connection name and TLS for every role that talks to the broker (the source, the
    sink, a step, a saga). ``uri`` keeps no password: one inside it moves to ``password`` unless ``password`` is
    given (the one place a URI's password is split out), so neither the repr nor a rendered ``uri`` option shows
    it; :attr:`login_uri` is what pika opens (TLS for ``amqps://``: :func:`~safebunny.uri.connection_parameters`)."""

    uri: str = option(lambda name, raw: validate_uri(raw, name), values="`amqp://` or `amqps://` URI",
                      doc="The broker, e.g. `amqp://user:password@host:5672/%2F`. The password is never logged.")
    password: str | None = option(
        parse_str, None, values="string", repr=False,
        doc="The broker password, replacing the one in `uri`. Prefer it to a password inside `uri`: "
            "Spark redacts an option named `password` in query plans, not one inside `uri`.")
    connection_name: str | None = option(
        parse_str, None, values="string",
        doc="The client-provided name of the connection this source or sink opens, which RabbitMQ shows in "
            "its management UI and `rabbitmqctl list_connections client_properties`. By default "
            "`safebunny/<queue>/consumer` for a source and `safebunny/publisher` for a sink; a saga names "
            "each `safebunny/<saga>/<driver>/<step or shard>/<role>`.")
    log_level: LogLevel | None = option(
        parse_choice(*LOG_LEVELS), None, values=", ".join(f"`{v}`" for v in LOG_LEVELS),
        doc="The level of safebunny's loggers in the processes Spark runs this source or sink in (its reader "
            "process, the executors' Python workers), where the driver's `SAFEBUNNY_LOG_LEVEL` does not "
            "reach on a cluster (and `spark.executorEnv.*` may be refused, as on Databricks standard access). "
            "`safebunny.read_stream`, `safebunny.publish`, steps and sagas set it from the driver's "
            "`SAFEBUNNY_LOG_LEVEL` when that is set.")

    def __post_init__(self) -> None:
        bare, password = split_password(validate_uri(self.uri, "uri"), self.password)
        object.__setattr__(self, "uri", bare)
        object.__setattr__(self, "password", password)

    @property
    def login_uri(self) -> str:
        """The broker's URI with the password, for pika."""
        return with_password(self.uri, self.password)

    def name_or(self, default: str) -> str:
        """The connection's client-provided name: ``connectionName`` when given, else ``default``."""
        return self.connection_name or default

    def named(self, name: str) -> ConnectionSettings:
        """The same broker and login under the client-provided name ``name``."""
        return replace(self, connection_name=name)

    def with_uri(self, uri: str) -> ConnectionSettings:
        """Another URI for the same login: a password inside ``uri`` replaces this one (as a command line's
        ``--uri`` does), else this password is kept."""
        password = split_password(uri)[1]
        return replace(self, uri=uri, password=self.password if password is None else password)


CONNECTION_OPTIONS = option_specs(ConnectionSettings)


def connection_settings(parsed: Mapping[str, Any]) -> ConnectionSettings:
    """The connection settings among a role's parsed options; sets the ``safebunny`` logger's level in this
    process from ``logLevel`` when given (each process that parses a source's or sink's options is one Spark runs
    it in)."""
    settings: ConnectionSettings = typed(ConnectionSettings, parsed)
    if settings.log_level is not None:
        logging.getLogger("safebunny").setLevel(getattr(logging, settings.log_level))
    return settings
