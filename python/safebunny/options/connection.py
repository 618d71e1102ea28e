"""The options every safebunny role shares: where the broker is and how to log in."""

from __future__ import annotations

import logging
from typing import Any

from safebunny.logs import LOG_LEVELS
from safebunny.options import OptionSpec, parse_choice, parse_str
from safebunny.uri import validate_uri, with_password

__all__: list[str] = []


def _uri(name: str, raw: str) -> str:
    return validate_uri(raw, name)


CONNECTION_OPTIONS: tuple[OptionSpec, ...] = (
    OptionSpec("uri", _uri, required=True, values="`amqp://` or `amqps://` URI",
               doc="The broker, e.g. `amqp://user:password@host:5672/%2F`. The password is never logged."),
    OptionSpec("password", parse_str, values="string",
               doc="The broker password, replacing the one in `uri`. Prefer it to a password inside `uri`: "
                   "Spark redacts an option named `password` in query plans, not one inside `uri`."),
    OptionSpec("connectionName", parse_str, values="string",
               doc="The client-provided name of the connection this source or sink opens, which RabbitMQ shows in "
                   "its management UI and `rabbitmqctl list_connections client_properties`. By default "
                   "`safebunny/<queue>/consumer` for a source and `safebunny/publisher` for a sink; a saga names "
                   "each `safebunny/<saga>/<driver>/<step or shard>/<role>`."),
    OptionSpec("logLevel", parse_choice(*LOG_LEVELS), values=", ".join(f"`{v}`" for v in LOG_LEVELS),
               doc="The level of safebunny's loggers in the processes Spark runs this source or sink in (its reader "
                   "process, the executors' Python workers), where the driver's `SAFEBUNNY_LOG_LEVEL` does not "
                   "reach on a cluster (and `spark.executorEnv.*` may be refused, as on Databricks standard access). "
                   "`safebunny.read_stream`, `safebunny.publish`, steps and sagas set it from the driver's "
                   "`SAFEBUNNY_LOG_LEVEL` when that is set."),
)


def apply_connection_options(options: dict[str, Any]) -> dict[str, Any]:
    """Fold the parsed ``password`` option into ``uri`` (in place), and set the ``safebunny`` logger's level in
    this process from the parsed ``logLevel`` option, when given (each process that parses a source's or sink's
    options is one Spark runs it in); returns ``options``."""
    options["uri"] = with_password(options["uri"], options.pop("password"))
    level = options.get("logLevel")
    if level is not None:
        logging.getLogger("safebunny").setLevel(getattr(logging, level))
    return options
