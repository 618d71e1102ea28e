"""The inbox table's layout, shared by its backends (delta-rs and Spark Delta write the same table)."""

from __future__ import annotations

import pyarrow as pa

__all__: list[str] = []

INBOX_SCHEMA = pa.schema([
    ("node", pa.string()),
    ("messageId", pa.string()),
    ("correlationId", pa.string()),
    ("causationId", pa.string()),
    ("type", pa.string()),
    ("epoch", pa.string()),
    ("batchId", pa.int64()),
    ("status", pa.string()),
    ("reason", pa.string()),
    ("attempts", pa.int32()),
    ("emitted", pa.list_(pa.string())),
    ("processedAt", pa.timestamp("us", tz="UTC")),
    ("processedDate", pa.string()),
])
#: A node's look-up reads only its own partitions inside the dedupe window.
PARTITIONS = ("node", "processedDate")
