"""The inbox on delta-rs (``deltalake``): the default backend, for a table given by path.

delta-rs records app transactions but does not skip a replayed one, so the append checks the
transaction version first (:class:`~safebunny.exactly_once.delta_rs.DeltaPath`). Look-ups are
pyarrow filters on the node's partitions inside the window, answered by the node's
:class:`~safebunny.exactly_once.inbox_index.SeenIndex` (O(batch)) when it can, else by a scan.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from safebunny.exactly_once.delta_rs import DeltaPath
from safebunny.exactly_once.inbox_index import SeenIndex
from safebunny.exactly_once.inbox_schema import INBOX_SCHEMA, PARTITIONS

__all__ = ["DeltaRsInboxStore"]


class DeltaRsInboxStore:
    """One inbox table at a path, read and written with delta-rs."""

    def __init__(self, path: str, indexed: bool = True) -> None:
        self.delta = DeltaPath(path, "The inbox", "inbox")
        self.path = self.delta.path
        self.indexed = indexed
        self._indexes: dict[str, SeenIndex] = {}

    def batch_done(self, app_id: str, node: str, epoch: str, batch_id: int) -> bool:
        committed = self.delta.version_of(app_id)
        return committed is not None and committed >= batch_id

    def seen(self, node: str, since: dt.date, message_ids: Sequence[str], epoch: str, batch_id: int) -> set[str]:
        index = self._indexes.get(node)
        if index is None and self.indexed:
            index = self._indexes[node] = SeenIndex(self.delta, node)
        if index is not None:
            found = index.lookup(message_ids, since, epoch, batch_id)
            if found is not None:
                return found
        return self.scan(node, since, message_ids, epoch, batch_id)

    def scan(self, node: str, since: dt.date, message_ids: Sequence[str], epoch: str, batch_id: int) -> set[str]:
        """:meth:`seen` by reading the node's partitions in the window (what the index saves)."""
        field = pc.field
        flt = ((field("node") == node) & (field("processedDate") >= since.isoformat())
               & (field("status") == "done") & field("messageId").isin(pa.array(list(message_ids), pa.string()))
               & ~((field("epoch") == epoch) & (field("batchId") == batch_id)))
        found = self.delta.read(flt, ["messageId"])
        return set() if found is None else set(found.column("messageId").to_pylist())

    def append(self, rows: pa.Table, app_id: str, version: int) -> bool:
        return self.delta.append(rows, app_id, version, PARTITIONS)

    def rows(self, node: str | None, correlation_id: str | None) -> pa.Table:
        flt = None if node is None else (pc.field("node") == node)
        if correlation_id is not None:
            by_corr = pc.field("correlationId") == correlation_id
            flt = by_corr if flt is None else flt & by_corr
        found = self.delta.read(flt)
        return INBOX_SCHEMA.empty_table() if found is None else found

    def maintain(self, keep_from: dt.datetime, vacuum: bool, node: str | None = None) -> dict[str, object]:
        from safebunny.exactly_once.retention import maintain

        return maintain(self.delta, keep_from, vacuum=vacuum, node=node)
