"""Republishing a saga's own copies of messages (to a retry tier, to poison, back from poison, and the
``fails_as`` failure messages) through the sink's confirming publisher.

Every copy goes through :class:`~safebunny.amqp.outgoing.MessageBuilder` and
:class:`~safebunny.amqp.confirming_publisher.ConfirmingPublisher`, as the sink and a step's emits do, keeps the
message's own id and carries a derived :data:`COPY_ID` header (:func:`copy_id`), so a replayed batch
republishes the same copies (docs/sagas.md).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from safebunny.amqp.confirming_publisher import ConfirmingPublisher, PublishCounts
from safebunny.amqp.message_rows import as_text
from safebunny.amqp.outgoing import CAUSATION_HEADER, MessageBuilder, plan_sink
from safebunny.amqp.sending import confirmed
from safebunny.ids import message_id
from safebunny.options.connection import ConnectionSettings
from safebunny.options.sink import SinkOptions

__all__ = ["COPY_ID", "copy_id"]

#: The header naming one copy of a message: the same for every republish of that copy.
COPY_ID = "x-safebunny-copy-id"


def copy_id(message_id_: str, queue: str, attempt: int) -> str:
    """The id of the copy of message ``message_id_`` sent to ``queue`` after its ``attempt``-th failure
    (the derivation of :func:`safebunny.ids.message_id`, with the queue as node and ``copy`` as type)."""
    return message_id(message_id_, queue, "copy", max(attempt, 0))


@dataclass
class Copy:
    """One message to republish: its own id, body, properties and where it goes."""

    message_id: str
    body: bytes
    exchange: str
    routing_key: str
    correlation_id: str | None = None
    message_type: str | None = None
    content_type: str | None = None
    headers: dict[str, Any] = field(default_factory=dict)


def publish_copies(uri: str, copies: list[Copy], scope: str, name: str) -> PublishCounts:
    """Publish ``copies`` with confirms on a connection named ``name`` and wait for every one; raises
    :class:`~safebunny.errors.SafeBunnyPublishError` unless each was confirmed and routed."""
    if not copies:
        return PublishCounts()
    opts = SinkOptions(connection=ConnectionSettings(uri, connection_name=name))
    builder = MessageBuilder(plan_sink(opts, {"value": "binary", "routingKey": "string", "exchange": "string"}), scope)

    def send(publisher: ConfirmingPublisher) -> None:
        stamp = int(time.time())
        for c in copies:
            headers: Mapping[str, Any] = c.headers
            cause = headers.get(CAUSATION_HEADER)
            msg = builder.build(c.body, timestamp=stamp, message_id_=c.message_id, correlation_id=c.correlation_id,
                                causation_id=as_text(cause) or None, headers={k: v for k, v in headers.items()
                                                                     if k != CAUSATION_HEADER},
                                content_type=c.content_type, message_type=c.message_type, exchange=c.exchange,
                                routing_key=c.routing_key)
            publisher.publish(msg.exchange, msg.routing_key, msg.body, msg.properties, msg.message_id)

    return confirmed(opts, send)
