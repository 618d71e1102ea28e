"""Publishing Arrow rows as messages, confirmed: the sink's task loop, also used by a step's emits.

:func:`publish_batches` is the per-row loop the Spark sink runs in each task (rows to
:class:`~safebunny.amqp.outgoing.OutgoingMessage`, then
:meth:`~safebunny.amqp.confirming_publisher.ConfirmingPublisher.publish`);
:func:`publish_table` runs it in the calling process, as a step publishes its emits from the driver
(docs/exactly-once.md, "Where the emits are published"). Both fail on any nack, return or confirm timeout.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

import pyarrow as pa

from safebunny.amqp.confirming_publisher import ConfirmingPublisher, PublishCounts, acquire, release
from safebunny.amqp.outgoing import MessageBuilder, plan_sink
from safebunny.crashpoints import crash_point
from safebunny.options.sink import SinkOptions

__all__ = ["arrow_columns", "confirmed", "publish_batches", "publish_table"]

_SPARK_TYPES = {
    pa.binary(): "binary", pa.large_binary(): "binary", pa.string(): "string", pa.large_string(): "string",
    pa.int32(): "int", pa.int64(): "bigint", pa.map_(pa.string(), pa.string()): "map<string,string>",
}


def arrow_columns(schema: pa.Schema) -> dict[str, str]:
    """The columns of an Arrow schema as the sink's checks name them (Spark's type strings)."""
    return {f.name: _SPARK_TYPES.get(f.type, str(f.type)) for f in schema}


def confirmed(opts: SinkOptions, send: Callable[[ConfirmingPublisher], None]) -> PublishCounts:
    """Run ``send`` on this process's pooled publisher for sink options ``opts`` and wait until every
    message is confirmed and routed (raises :class:`~safebunny.errors.SafeBunnyPublishError` otherwise); the
    publisher goes back to the pool, or is closed when anything failed."""
    publisher = acquire(opts.connection.login_uri, max_in_flight=opts.max_in_flight,
                        confirm_timeout=opts.confirm_timeout_ms / 1000.0, heartbeat=opts.heartbeat_seconds,
                        connect_timeout=opts.connect_timeout_ms / 1000.0,
                        name=opts.connection.name_or("safebunny/publisher"))
    healthy = False
    try:
        send(publisher)
        counts = publisher.flush()
        healthy = True
    finally:
        release(publisher, healthy)
    return counts


def publish_batches(publisher: ConfirmingPublisher, builder: MessageBuilder, batches: Iterable[pa.RecordBatch]) -> None:
    """Build and publish every row of ``batches``; the caller flushes (waits for the confirms)."""
    publish = publisher.publish
    build = builder.build
    for batch in batches:
        rows = batch.num_rows
        if rows == 0:
            continue
        publisher.service()  # heartbeats and broker notices, even when batches arrive slowly
        cols = {name: batch.column(i).to_pylist() for i, name in enumerate(batch.schema.names)}
        none: list[Any] = [None] * rows
        value = cols["value"]
        mids, corrs, causes, headers, ctypes, types, exchanges, keys, indexes = (cols.get(name, none) for name in (
            "messageId", "correlationId", "causationId", "headers", "contentType", "type", "exchange", "routingKey",
            "outputIndex"))
        stamp = int(time.time())
        for i in range(rows):
            msg = build(value[i], timestamp=stamp, message_id_=mids[i], correlation_id=corrs[i],
                        causation_id=causes[i], headers=headers[i], content_type=ctypes[i],
                        message_type=types[i], exchange=exchanges[i], routing_key=keys[i], output_index=indexes[i])
            publish(msg.exchange, msg.routing_key, msg.body, msg.properties, msg.message_id)
        crash_point("sink.mid_publish")  # published, not all confirmed: the crash tests' point


def publish_table(table: pa.Table, options: SinkOptions, scope: str) -> PublishCounts:
    """Publish ``table``'s rows (the sink's columns) with the sink's ``options``, here, and wait until
    every message is confirmed and routed; raises :class:`~safebunny.errors.SafeBunnyPublishError`
    otherwise. ``scope`` names this write in ids of rule 3 (rows without a message id or cause)."""
    builder = MessageBuilder(plan_sink(options, arrow_columns(table.schema)), scope)
    return confirmed(options, lambda publisher: publish_batches(publisher, builder, table.to_batches()))
