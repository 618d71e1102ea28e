"""The options of the safebunny sink (``df.write.format("safebunny")`` and ``df.writeStream``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields

from safebunny.options import option, option_specs, parse_int, parse_options, parse_str, spark_options, typed
from safebunny.options.connection import CONNECTION_OPTIONS, ConnectionSettings, connection_settings

__all__ = ["SINK_OPTIONS", "PublishOptions", "SinkOptions", "parse_sink_options", "sink_options"]


@dataclass(frozen=True)
class PublishOptions:
    """How a publisher waits for the broker: the sink's options that a step's emits take too
    (``StepSettings(publish_options=PublishOptions(confirm_timeout_ms=5000))``)."""

    max_in_flight: int = option(parse_int(1, 65535), 1000, values="1 to 65535",
                                doc="Unconfirmed messages allowed per task before publishing waits for confirms.")
    confirm_timeout_ms: int = option(parse_int(1), 30000, values="milliseconds",
                                     doc="How long a message may stay unconfirmed before the task fails (Spark then "
                                         "retries it).")
    heartbeat_seconds: int = option(parse_int(0), 30, values="seconds",
                                    doc="AMQP heartbeat of the publishing connection (0 disables). A cached connection "
                                        "idle for longer than this is reopened before use.")
    connect_timeout_ms: int = option(parse_int(1), 10000, values="milliseconds",
                                     doc="How long opening the connection may take before the task fails.")


@dataclass(frozen=True)
class SinkOptions(PublishOptions):
    """The sink's options (:data:`SINK_OPTIONS`) as a typed value: each option is a field (its attribute is its name
    in snake_case, ``maxInFlight`` -> ``max_in_flight``), the connection's under ``connection``."""

    connection: ConnectionSettings = field(kw_only=True)
    exchange: str = option(lambda name, raw: raw if raw == "" else parse_str(name, raw), "",
                           values="exchange name, `\"\"` = default exchange",
                           doc="Where to publish; an `exchange` column overrides it per row. The exchange must exist.")
    routing_key: str | None = option(parse_str, None, values="routing key",
                                     doc="The routing key; a `routingKey` column overrides it per row. One of the two "
                                         "is required.")
    node: str | None = option(parse_str, None, values="node name",
                              doc="The target node in derived message ids (`safebunny.message_id`); defaults to the "
                                  "row's routing key.")
    type: str | None = option(parse_str, None, values="message type",  # noqa: A003 - the option's name
                              doc="The AMQP `type` property and the type in derived ids, when there is no `type` "
                                  "column.")
    content_type: str | None = option(parse_str, None, values="MIME type",
                                      doc="The `content_type` property when there is no `contentType` column. "
                                          "Default: `text/plain; charset=utf-8` for a string `value`, "
                                          "`application/octet-stream` for binary.")

    def spark_options(self) -> dict[str, str]:
        """These options as ``df.write.format("safebunny").options(...)`` takes them (the password as its own
        ``password`` option, which Spark redacts in plans)."""
        return spark_options(SINK_OPTIONS, self.connection, self)


SINK_OPTIONS = (*CONNECTION_OPTIONS, *option_specs(SinkOptions))


def parse_sink_options(raw: Mapping[str, str]) -> SinkOptions:
    """Validate the sink's options (case-insensitive strings, as Spark passes them) into :class:`SinkOptions`;
    raises :class:`SafeBunnyOptionError` naming the option."""
    parsed = parse_options(raw, SINK_OPTIONS, role="sink")
    return typed(SinkOptions, parsed, connection=connection_settings(parsed))


def sink_options(connection: ConnectionSettings, publish: PublishOptions) -> SinkOptions:
    """The sink options that publish on ``connection`` as ``publish`` says (a step's emits)."""
    return SinkOptions(connection=connection, **{f.name: getattr(publish, f.name) for f in fields(PublishOptions)})
