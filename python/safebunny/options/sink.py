"""The options of the safebunny sink (``df.write.format("safebunny")`` and ``df.writeStream``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from safebunny.options import OptionSpec, parse_int, parse_options, parse_str, spark_options, typed
from safebunny.options.connection import CONNECTION_OPTIONS, ConnectionSettings, connection_settings

__all__ = ["SINK_OPTIONS", "SinkOptions", "parse_sink_options", "sink_options"]


SINK_OPTIONS: tuple[OptionSpec, ...] = (
    *CONNECTION_OPTIONS,
    OptionSpec("exchange", lambda name, raw: raw if raw == "" else parse_str(name, raw), default="",
               values="exchange name, `\"\"` = default exchange",
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


@dataclass(frozen=True)
class SinkOptions:
    """The sink's options (:data:`SINK_OPTIONS`) as a typed value: each option's attribute is its name in
    snake_case (``maxInFlight`` -> ``max_in_flight``), the connection's under ``connection``. The defaults are
    the table's (tests/unit/test_sink_options.py checks that they agree)."""

    connection: ConnectionSettings
    exchange: str = ""
    routing_key: str | None = None
    node: str | None = None
    type: str | None = None  # noqa: A003 - the option's name
    content_type: str | None = None
    max_in_flight: int = 1000
    confirm_timeout_ms: int = 30000
    heartbeat_seconds: int = 30
    connect_timeout_ms: int = 10000

    def spark_options(self) -> dict[str, str]:
        """These options as ``df.write.format("safebunny").options(...)`` takes them (the password as its own
        ``password`` option, which Spark redacts in plans)."""
        return spark_options(SINK_OPTIONS, self.connection, self)


def parse_sink_options(raw: Mapping[str, str]) -> SinkOptions:
    """Validate the sink's options (case-insensitive strings, as Spark passes them) into :class:`SinkOptions`;
    raises :class:`SafeBunnyOptionError` naming the option."""
    parsed = parse_options(raw, SINK_OPTIONS, role="sink")
    return typed(SinkOptions, parsed, connection=connection_settings(parsed))


def sink_options(connection: ConnectionSettings, extra: Mapping[str, str]) -> SinkOptions:
    """The sink options for ``connection`` with the publishing options among ``extra`` (strings, as a user passes
    them to ``df.write``, e.g. ``{"confirmTimeoutMs": "5000"}``; a step's ``publish_options``), checked by the same
    table; the connection's own options are not among them."""
    specs = [spec for spec in SINK_OPTIONS if spec not in CONNECTION_OPTIONS]
    return typed(SinkOptions, parse_options(extra, specs, role="sink"), connection=connection)
