"""The inbox: a Delta table of the messages each node has processed.

One table may serve many nodes; it is partitioned by ``(node, processedDate)`` so a node's look-up
reads only its own partitions inside the dedupe window. Each batch appends its rows in one commit
with the app transaction ``(safebunny.inbox.<node>.<epoch>, batchId)``: that commit is the marker
"every effect of this batch is done" (DESIGN.md, the inbox protocol).

Columns: node, messageId, correlationId, causationId, type (the message's AMQP type), epoch, batchId,
status (``done`` or ``failed``), reason, attempts, emitted (the ids of the messages the row caused), processedAt,
processedDate. Only ``done`` rows count as processed: a failed message that comes back from a retry
tier is processed again.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from safebunny.errors import SafeBunnyOptionError
from safebunny.exactly_once.delta_rs import DeltaPath

__all__ = ["INBOX_SCHEMA", "PARTITIONS", "Inbox", "InboxRow", "DEFAULT_WINDOW"]

DEFAULT_WINDOW = dt.timedelta(days=7)

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
PARTITIONS = ("node", "processedDate")


@dataclass(frozen=True)
class InboxRow:
    """One processed (or failed) message, as the inbox records it."""

    message_id: str
    correlation_id: str | None
    causation_id: str | None
    status: str = "done"
    reason: str | None = None
    attempts: int = 1
    emitted: tuple[str, ...] = ()
    message_type: str | None = None


class Inbox:
    """A node's view of the inbox table at ``path`` (delta-rs).

    ``window`` is the dedupe window: a duplicate that arrives later than this after the original was
    processed is not caught (older partitions are dropped by :meth:`maintain`).
    """

    def __init__(self, path: str, node: str, window: dt.timedelta = DEFAULT_WINDOW) -> None:
        if not node or any(c in node for c in "./*#\\"):
            raise SafeBunnyOptionError(
                f"A node name must be non-empty and free of '.', '/', '*', '#': got {node!r}.", "node")
        if window <= dt.timedelta(0):
            raise SafeBunnyOptionError(f"The dedupe window must be positive; got {window!r}.", "window")
        self.path = path
        self.node = node
        self.window = window
        self._delta = DeltaPath(path)

    def app_id(self, epoch: str) -> str:
        return f"safebunny.inbox.{self.node}.{epoch}"

    def batch_done(self, epoch: str, batch_id: int) -> bool:
        """Whether batch ``batch_id`` of ``epoch`` has recorded its rows (all its effects are done)."""
        committed = self._delta.version_of(self.app_id(epoch))
        return committed is not None and committed >= batch_id

    def seen(self, message_ids: Sequence[str], epoch: str, batch_id: int,
             now: dt.datetime | None = None) -> set[str]:
        """The ids among ``message_ids`` this node processed before, within the window, leaving out
        the rows that batch ``(epoch, batch_id)`` itself wrote (so its replay is processed again)."""
        if not message_ids:
            return set()
        start = _date(now) - self.window
        field = pc.field
        flt = ((field("node") == self.node) & (field("processedDate") >= start.date().isoformat())
               & (field("status") == "done") & field("messageId").isin(pa.array(list(message_ids), pa.string()))
               & ~((field("epoch") == epoch) & (field("batchId") == batch_id)))
        found = self._delta.read(flt, ["messageId"])
        return set() if found is None else set(found.column("messageId").to_pylist())

    def record(self, rows: Iterable[InboxRow], epoch: str, batch_id: int, now: dt.datetime | None = None) -> bool:
        """Append ``rows`` as batch ``(epoch, batch_id)``'s marker; a no-op when already recorded."""
        stamp = _date(now)
        rows = list(rows)
        table = pa.Table.from_pylist([{
            "node": self.node, "messageId": r.message_id, "correlationId": r.correlation_id,
            "causationId": r.causation_id, "type": r.message_type, "epoch": epoch, "batchId": batch_id,
            "status": r.status, "reason": r.reason, "attempts": r.attempts, "emitted": list(r.emitted),
            "processedAt": stamp, "processedDate": stamp.date().isoformat()} for r in rows], schema=INBOX_SCHEMA)
        return self._delta.append(table, self.app_id(epoch), batch_id, PARTITIONS)

    def rows(self, correlation_id: str | None = None, all_nodes: bool = False) -> pa.Table:
        """The inbox rows of this node (or every node), optionally of one saga instance."""
        flt = None if all_nodes else (pc.field("node") == self.node)
        if correlation_id is not None:
            by_corr = pc.field("correlationId") == correlation_id
            flt = by_corr if flt is None else flt & by_corr
        found = self._delta.read(flt)
        return INBOX_SCHEMA.empty_table() if found is None else found

    def maintain(self, now: dt.datetime | None = None, vacuum: bool = True) -> dict[str, object]:
        """Drop partitions older than the window, compact, vacuum and sweep staging files.

        Run it from one job at a time (a daily scheduled job is plenty); see README, Exactly-once steps.
        """
        from safebunny.exactly_once.retention import maintain

        return maintain(self._delta, _date(now) - self.window, vacuum=vacuum)

    def exists(self) -> bool:
        return os.path.exists(os.path.join(self._delta.path, "_delta_log")) if "://" not in self.path else \
            self._delta.table() is not None


def _date(now: dt.datetime | None) -> dt.datetime:
    return now or dt.datetime.now(dt.timezone.utc)
