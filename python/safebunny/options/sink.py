"""The options of the safebunny sink (``df.write.format("safebunny")`` and ``df.writeStream``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from safebunny.options import OptionSpec, options_table, parse_int, parse_options, parse_str
from safebunny.options.connection import CONNECTION_OPTIONS, apply_connection_options

__all__ = ["SINK_OPTIONS", "parse_sink_options", "sink_options_table"]



def _any_str(name: str, raw: str) -> str:
    """Any string, the empty string included (the default exchange is named '')."""
    return "" if raw == "" else parse_str(name, raw)


SINK_OPTIONS: tuple[OptionSpec, ...] = (
    *CONNECTION_OPTIONS,
    OptionSpec("exchange", _any_str, default="", values="exchange name, `\"\"` = default exchange",
               doc="Where to publish; an `exchange` column overrides it per row. The exchange must exist."),
    OptionSpec("routingKey", parse_str, values="routing key",
               doc="The routing key; a `routingKey` column overrides it per row. One of the two is required."),
    OptionSpec("node", parse_str, values="node name",
               doc="The target node in derived message ids (`safebunny.message_id`); defaults to the row's "
                   "routing key."),
    OptionSpec("type", parse_str, values="message type",
               doc="The AMQP `type` property and the type in derived ids, when there is no `type` column."),
    OptionSpec("contentType", parse_str, values="MIME type",
               doc="The `content_type` property when there is no `contentType` column. Default: "
                   "`text/plain; charset=utf-8` for a string `value`, `application/octet-stream` for binary."),
    OptionSpec("maxInFlight", parse_int(1, 65535), default=1000, values="1 to 65535",
               doc="Unconfirmed messages allowed per task before publishing waits for confirms."),
    OptionSpec("confirmTimeoutMs", parse_int(1), default=30000, values="milliseconds",
               doc="How long a message may stay unconfirmed before the task fails (Spark then retries it)."),
    OptionSpec("heartbeatSeconds", parse_int(0), default=30, values="seconds",
               doc="AMQP heartbeat of the publishing connection (0 disables). A cached connection idle "
                   "for longer than this is reopened before use."),
    OptionSpec("connectTimeoutMs", parse_int(1), default=10000, values="milliseconds",
               doc="How long opening the connection may take before the task fails."),
)


def parse_sink_options(raw: Mapping[str, str]) -> dict[str, Any]:
    """Validate the sink's options; raises :class:`SafeBunnyOptionError` naming the option."""
    options = parse_options(raw, SINK_OPTIONS, role="sink")
    return apply_connection_options(options)


def sink_options_table() -> str:
    """The table of sink options in docs/sink.md."""
    return options_table(SINK_OPTIONS)
