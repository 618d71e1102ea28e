"""What a row handler decided for each message: the batch's outcome record, and the Delta table of committed decisions.

:class:`OutcomeLog`: a row handler calls services whose answers can change; a replay must apply and publish what
the first attempt decided, so the decisions are written (durably, atomically) before anything is applied.

:class:`DecisionTable`: a batch's successful decisions are committed to this Delta table as one more fenced target
(:mod:`~safebunny.exactly_once.claims.fence`); a batch that loses the race adopts the decisions that landed
(:meth:`DecisionTable.read`), so an instance never takes two branches (docs/exactly-once.md, "The fence",
item 5). A failed decision is never committed: the message is decided again when it comes back.

Table ``<state>/_decisions`` (delta-rs, beside the claims), or ``<inbox>_decisions`` by name beside an inbox by name
(:attr:`~safebunny.exactly_once.inbox.table.Inbox.decisions`): ``node``, ``messageId``, ``epoch``,
``batchId``, ``decision`` (JSON), ``decidedDate``. :meth:`DecisionTable.maintain` (called by
``Inbox.maintain``) deletes a node's rows older than its dedupe window.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import orjson
import pyarrow as pa
from pyarrow import fs as pafs

from safebunny.delta.backend import delta_target
from safebunny.exactly_once.outcome import Effect
from safebunny.storage.location import absolute_location, resolve_under
from safebunny.storage.records import list_records, read_record, remove_record
from safebunny.storage.writes import write_atomically

__all__ = ["DecisionTable", "OutcomeLog"]

DECISIONS_SCHEMA = pa.schema([("node", pa.string()), ("messageId", pa.string()), ("epoch", pa.string()),
                              ("batchId", pa.int64()), ("decision", pa.string()), ("decidedDate", pa.string())])


class OutcomeLog:
    """Files ``<state>/_outcomes/<node>/<epoch>/<batch>.json`` in a step's state location (beside the claims)."""

    def __init__(self, root: str, node: str) -> None:
        self.root = absolute_location(root)
        self.node = node

    def _path(self, epoch: str, batch_id: int) -> tuple[pafs.FileSystem, str]:
        return resolve_under(self.root, "state", "_outcomes", self.node, epoch, f"{batch_id}.json")

    def read(self, epoch: str, batch_id: int) -> Any | None:
        data = read_record(*self._path(epoch, batch_id))
        return None if data is None else orjson.loads(data)

    def write(self, epoch: str, batch_id: int, record: Any) -> None:
        filesystem, path = self._path(epoch, batch_id)
        write_atomically(filesystem, path, orjson.dumps(record, default=jsonable))

    def forget_before(self, epoch: str, batch_id: int) -> None:
        """Remove the records of this epoch's batches before ``batch_id`` (they are committed)."""
        filesystem, path = self._path(epoch, batch_id)
        folder = path.rsplit("/", 1)[0]
        for info in list_records(filesystem, folder):
            stem = info.base_name.split(".", 1)[0]
            if stem.isdigit() and int(stem) < batch_id - 1:
                remove_record(filesystem, info.path)


def jsonable(value: Any) -> Any:
    """A decision's value that JSON has no type for (``orjson``'s ``default``): bytes as text, else ``str``."""
    return value.decode("utf-8", "replace") if isinstance(value, (bytes, bytearray)) else str(value)


class DecisionTable:
    """The committed row-handler decisions of one node (the table is shared by the nodes of a state root)."""

    def __init__(self, table: str, node: str) -> None:
        self.path = table
        self.node = node
        self.effect = Effect("append", None, self.path)
        self._delta = delta_target(self.path)

    def rows(self, decisions: Mapping[str, Any], ids: Sequence[str], epoch: str, batch_id: int,
             today: dt.date | None = None) -> pa.Table:
        """The table rows of ``ids``' decisions, made by batch ``(epoch, batch_id)``."""
        day = (today or dt.datetime.now(dt.timezone.utc).date()).isoformat()
        return pa.table({"node": [self.node] * len(ids), "messageId": list(ids), "epoch": [epoch] * len(ids),
                         "batchId": [batch_id] * len(ids),
                         "decision": [orjson.dumps(decisions[mid], default=jsonable).decode() for mid in ids],
                         "decidedDate": [day] * len(ids)}, schema=DECISIONS_SCHEMA)

    def maintain(self, keep_from: dt.date) -> int:
        """Delete this node's decisions made before ``keep_from``; returns how many."""
        return self._delta.delete_before(self.node, "decidedDate", keep_from.isoformat()) or 0

    def read(self, ids: Iterable[str]) -> dict[str, Any]:
        """The committed decision of each of ``ids`` that has one. A message has one row: a batch that meets
        another's committed decision reuses it and commits nothing for it."""
        wanted = sorted(set(ids))
        if not wanted:
            return {}
        found = self._delta.read({"node": self.node, "messageId": wanted},
                                 ["messageId", "decision", "epoch", "batchId"])
        out: dict[str, Any] = {}
        if found is None:
            return out
        for row in found.to_pylist():
            out.setdefault(row["messageId"], orjson.loads(row["decision"]))
        return out
