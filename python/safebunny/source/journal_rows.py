"""Deliveries to the queue source's Arrow rows (what a batch's journal file holds), and journaled rows back
in the query's current shape."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

from safebunny.amqp.message_rows import AmqpColumns, arrow_schema
from safebunny.errors import SafeBunnyOptionError

if TYPE_CHECKING:
    from safebunny.source.consumer import Delivery

__all__ = ["fit_headers"]


def fit_headers(batch: pa.RecordBatch, include_headers: bool, start_seq: int, end_seq: int) -> pa.RecordBatch:
    """A journaled batch in the query's current shape: ``includeHeaders`` may have changed since it was
    written. Headers the query no longer wants are dropped; headers it wants but the journal never
    kept cannot be made up, which is a clear error rather than an Arrow schema mismatch."""
    has = "headers" in batch.schema.names
    if has and not include_headers:
        return batch.drop_columns(["headers"])
    if include_headers and not has:
        raise SafeBunnyOptionError(
            f"The batch ({start_seq}, {end_seq}] was journaled with includeHeaders=false, and the query now asks "
            "for headers: a replay cannot invent them. Set option 'includeHeaders' back to 'false' until this "
            "batch has committed (one run), then turn it on.", "includeHeaders")
    return batch


def deliveries_to_table(queue: str, deliveries: list[Delivery], include_headers: bool) -> pa.Table:
    """The source's rows for ``deliveries``, as a table whose record batches each hold at most
    ``MAX_CHUNK_BYTES`` of bodies: a batch of any total size can be journaled, although one Arrow
    ``binary`` array holds less than 2 GiB."""
    columns = AmqpColumns(include_headers)
    columns.extend([d.body for d in deliveries], [d.properties for d in deliveries],
                   [d.exchange for d in deliveries], [d.routing_key for d in deliveries],
                   [d.redelivered for d in deliveries])
    batches = columns.to_batches(queue)
    return pa.Table.from_batches(batches, schema=arrow_schema(include_headers, include_offset=True))
