"""The inbox, the Delta table of the messages each node has processed.

One table may serve many nodes; it is partitioned by ``(node, processedDate)`` so a node's look-up
reads only its own partitions inside the dedupe window. Each batch appends its rows in one commit
with the app transaction ``(safebunny.inbox.<node>.<epoch>, batchId)``: that commit is the marker
"every effect of this batch is done" (docs/exactly-once.md). The columns:
:data:`INBOX_SCHEMA`. Only ``done`` rows count as processed: a failed
message that comes back from a retry tier is processed again.

Writes, plain reads, maintenance and the look-ups (is a batch done, which ids were seen) go through the inbox's
target (:class:`~safebunny.delta.target.DeltaTarget`), which checks a replayed append (delta-rs) or has Spark Delta
skip it, and answers the look-ups in its own backend's terms.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa

from safebunny.delta.backend import delta_target
from safebunny.delta.target import BACKENDS, is_path
from safebunny.errors import SafeBunnyOptionError
from safebunny.exactly_once.inbox.decisions import DecisionTable
from safebunny.storage.location import absolute_location
from safebunny.storage.volumes import refuse_volume

__all__ = ["decisions_location", "INBOX_SCHEMA", "PARTITIONS", "Inbox", "InboxRow", "DEFAULT_WINDOW", "state_location"]

log = logging.getLogger("safebunny.inbox")
DEFAULT_WINDOW = dt.timedelta(days=7)
#: the columns, the same whichever backend writes the table
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
    """A node's view of the inbox table ``path``: a path (delta-rs, the default) or, with Spark Delta in
    the session (Databricks), a table name; ``backend="spark"`` reads and writes a path through Spark Delta.

    ``window`` is the dedupe window: a duplicate that arrives later than this after the original was
    processed is not caught (older partitions are dropped by :meth:`maintain`). ``state``: where the node's
    claims, outcome logs and row decisions live (:func:`state_location`).
    """

    def __init__(self, path: str, node: str, window: dt.timedelta = DEFAULT_WINDOW, backend: str = "auto",
                 state: str | None = None) -> None:
        if not node or any(c in node for c in "./*#\\"):
            raise SafeBunnyOptionError(
                f"A node name must be non-empty and free of '.', '/', '*', '#': got {node!r}.", "node")
        if window <= dt.timedelta(0):
            raise SafeBunnyOptionError(f"The dedupe window must be positive; got {window!r}.", "window")
        if backend not in BACKENDS:
            raise SafeBunnyOptionError(f"The inbox backend must be one of {', '.join(BACKENDS)}; got {backend!r}.",
                                       "backend")
        self.path = path
        self._state = state
        self.node = node
        self.window = window
        self.target = delta_target(path, backend=backend, what="The inbox", option="inbox")
        self.backend = self.target.backend

    @property
    def state(self) -> str:
        """The node's state location (:func:`state_location`), absolute; raises for a table name without one."""
        return state_location(self.path, self._state)

    @property
    def decisions(self) -> str:
        """The table of the node's committed row decisions: by name beside an inbox by name (``<inbox>_decisions``,
        so nothing of delta-rs goes to the state location), else ``<state>/_decisions``."""
        return decisions_location(self.path, self._state)

    def app_id(self, epoch: str) -> str:
        return f"safebunny.inbox.{self.node}.{epoch}"

    def batch_done(self, epoch: str, batch_id: int) -> bool:
        """Whether batch ``batch_id`` of ``epoch`` has recorded its rows (all its effects are done)."""
        return self.target.batch_done(self.app_id(epoch), self.node, epoch, batch_id)

    def seen(self, message_ids: Sequence[str], epoch: str, batch_id: int,
             now: dt.datetime | None = None) -> set[str]:
        """The ids among ``message_ids`` this node processed before, within the window, leaving out
        the rows that batch ``(epoch, batch_id)`` itself wrote (so its replay is processed again)."""
        if not message_ids:
            return set()
        since = (_date(now) - self.window).date()
        return self.target.seen(self.node, since, message_ids, epoch, batch_id)

    def record(self, rows: Sequence[InboxRow], epoch: str, batch_id: int, now: dt.datetime | None = None) -> bool:
        """Append ``rows`` as batch ``(epoch, batch_id)``'s marker; a no-op when already recorded."""
        stamp = _date(now)
        n = len(rows)
        table = pa.Table.from_pydict({
            "node": [self.node] * n, "messageId": [r.message_id for r in rows],
            "correlationId": [r.correlation_id for r in rows], "causationId": [r.causation_id for r in rows],
            "type": [r.message_type for r in rows], "epoch": [epoch] * n, "batchId": [batch_id] * n,
            "status": [r.status for r in rows], "reason": [r.reason for r in rows],
            "attempts": [r.attempts for r in rows], "emitted": [list(r.emitted) for r in rows],
            "processedAt": [stamp] * n, "processedDate": [stamp.date().isoformat()] * n}, schema=INBOX_SCHEMA)
        appended = self.target.append(table, self.app_id(epoch), batch_id, PARTITIONS)
        if appended:  # a target that indexes its look-ups takes the done ids from here, not from a read
            self.target.recorded(self.node, epoch, batch_id, [r.message_id for r in rows if r.status == "done"])
        return appended

    def rows(self, correlation_id: str | None = None, all_nodes: bool = False) -> pa.Table:
        """The inbox rows of this node (or every node), optionally of one saga instance."""
        equal = {} if all_nodes else {"node": self.node}
        if correlation_id is not None:
            equal["correlationId"] = correlation_id
        found = self.target.read(equal)
        return INBOX_SCHEMA.empty_table() if found is None else found

    def maintain(self, now: dt.datetime | None = None, vacuum: bool = True,
                 parked_for: dt.timedelta | None = None) -> dict[str, object]:
        """Drop this node's partitions older than its window, compact, vacuum and sweep staging files; delete
        its committed row decisions older than the window too, and its parkings older than ``parked_for`` (a saga:
        its ``poison_max_age``, how long its poison queue keeps them; default the window). Other nodes sharing the
        table keep their rows. Run it from one job at a time (docs/exactly-once.md, "Maintenance")."""
        keep_from = _date(now) - self.window
        cutoff = keep_from.date().isoformat()
        done: dict[str, object] = {"deleted": self.target.delete_before(self.node, "processedDate", cutoff),
                                   **self.target.compact(vacuum)}
        log.info("inbox %s maintained: %s", self.target.table, done)
        # the node's committed row decisions, where its claims live (exactly_once/inbox/decisions.py)
        parked_from = None if parked_for is None else (_date(now) - parked_for).date()
        done["decisions"] = DecisionTable(self.decisions, self.node).maintain(keep_from.date(), parked_from)
        return done


def decisions_location(inbox: str, state: str | None) -> str:
    """The table of a node's committed row decisions (and parkings): ``<inbox>_decisions`` by name beside an inbox by
    name (nothing of delta-rs in the state location), else ``<state>/_decisions``."""
    return inbox + "_decisions" if not is_path(inbox) else f"{state_location(inbox, state).rstrip('/')}/_decisions"


def state_location(inbox: str, state: str | None) -> str:
    """Where a step keeps what is not a row of its inbox (its claims, outcome logs and the table of its row
    decisions): ``state`` when given, else the folder of an inbox given by path. An inbox given by table
    name has no folder, and the driver's working directory is no durable place (a job retried on a new
    cluster, or serverless, loses it): ``state`` is required there, and may be a Unity Catalog volume (it holds
    plain files only: the row decisions are a table by name beside the inbox)."""
    if state is None and not is_path(inbox):
        raise SafeBunnyOptionError(
            f"The inbox {inbox!r} is a table name, so the step has no folder for its claims, outcome logs and row "
            "decisions: give StepSettings(state=...) a durable location that every driver of the step reaches (a "
            "URI such as 's3://bucket/sagas/orders/state', or a folder under the saga's root), never the "
            "driver's local disk.", "state")
    location = inbox if state is None else state
    if is_path(inbox):  # its row decisions are a delta-rs table there (:attr:`Inbox.decisions`)
        refuse_volume(location, "The step's state location (option 'state'; by default the inbox's folder)", "state")
    return absolute_location(location)


def _date(now: dt.datetime | None) -> dt.datetime:
    return now or dt.datetime.now(dt.timezone.utc)
