"""What a row handler decided for each message: the batch's outcome record, and the Delta table of committed decisions.

:class:`OutcomeLog`: a row handler calls services whose answers can change; a replay must apply and publish what
the first attempt decided, so the decisions are written (durably, atomically) before anything is applied.

:class:`DecisionTable`: a batch's successful decisions are committed to this Delta table as one more fenced target
(:mod:`~safebunny.exactly_once.claims.fence`); a batch that loses the race adopts the decisions that landed
(:meth:`DecisionTable.read`), so an instance never takes two branches (docs/exactly-once.md, "The fence",
item 5). A failed decision is never committed: the message is decided again when it comes back; a failure
the step parks for good is (:func:`parking`), in the same fenced commit, so of two live batches on one message
exactly one decision lands, applied or parked (docs/exactly-once.md, "Failure routing"). A step that parks
(``StepSettings(parks=...)``) with a DataFrame handler commits ``{"ok": true}`` for each message it applies.

A parking covers one *round* of a message: the copies with the :data:`REDRIVEN` stamp it was decided on (none, or
the one a redrive set), so a redriven copy is decided afresh; an applied decision covers every copy.

Table ``<state>/_decisions`` (delta-rs, beside the claims), or ``<inbox>_decisions`` by name beside an inbox by name
(:attr:`~safebunny.exactly_once.inbox.table.Inbox.decisions`): ``node``, ``messageId``, ``epoch``,
``batchId``, ``decision`` (JSON), ``decidedDate``. :meth:`DecisionTable.maintain` (called by
``Inbox.maintain``) deletes a node's decisions older than its dedupe window, and its parkings older than theirs
(a saga's poison queue keeps a parked message for ``poison_max_age``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc
from pyarrow import fs as pafs

from safebunny.delta.backend import delta_target
from safebunny.exactly_once.outcome import Effect
from safebunny.storage.location import absolute_location, resolve_under
from safebunny.storage.records import list_records, read_record, remove_record
from safebunny.storage.writes import write_atomically

__all__ = ["DecisionTable", "OutcomeLog", "REDRIVEN", "parking", "pick", "rounds_of"]

#: the header a redrive stamps on the copies it sends back: a parking covers the copies of its own stamp only
REDRIVEN = "x-safebunny-redriven"
#: how a parking's JSON starts (its first key), what maintenance tells parkings by
_PARKED = '{"parked":true'

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


def parking(record: Mapping[str, Any]) -> dict[str, Any]:
    """The committed decision that parks a message for good: ``record`` holds its ``reason``, ``error_type``,
    ``attempt`` and the ``redriven`` stamp of the copy it was decided on."""
    return {"parked": True, "ok": False, "reason": record.get("reason") or "", "attempts": 1,
            **{k: v for k, v in record.items() if k != "reason"}}


def rounds_of(table: pa.Table) -> dict[str, str | None]:
    """Each message's round (the :data:`REDRIVEN` header of its copy, None without one) in a batch's Arrow rows."""
    ids = table.column("messageId").to_pylist()
    if "headers" not in table.column_names:
        return dict.fromkeys(ids)
    stamps = pc.map_lookup(table.column("headers"), REDRIVEN, "first").to_pylist()
    out: dict[str, str | None] = {}
    for mid, stamp in zip(ids, stamps, strict=True):  # the first copy of each (the one a step handles)
        out.setdefault(mid, None if stamp is None else str(stamp))
    return out


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

    def maintain(self, keep_from: dt.date, parked_from: dt.date | None = None) -> int | None:
        """Delete this node's decisions made before ``keep_from``, and its parkings made before ``parked_from``
        (default ``keep_from``); returns how many (None: a table by name, whose deletes do not say)."""
        counts = [self._delta.delete_before(self.node, "decidedDate", before.isoformat(), ("decision", _PARKED, parked))
                  for parked, before in ((False, keep_from), (True, parked_from or keep_from))]
        return None if None in counts else sum(c or 0 for c in counts)

    def read(self, ids: Iterable[str], rounds: Mapping[str, str | None] | None = None) -> dict[str, Any]:
        """The committed decision of each of ``ids`` that has one: an applied one, else the parking of the
        message's round (``rounds``: id -> :data:`REDRIVEN` stamp of its copy; None without). A message has one
        per round: a batch that meets another's committed decision reuses it and commits nothing for it."""
        return pick(self.committed(ids), rounds)

    def committed(self, ids: Iterable[str]) -> list[tuple[str, dict[str, Any]]]:
        """Every committed decision of ``ids``, each with the ``_epoch`` and ``_batch`` that committed it."""
        wanted = sorted(set(ids))
        found = None if not wanted else self._delta.read({"node": self.node, "messageId": wanted},
                                                         ["messageId", "decision", "epoch", "batchId"])
        if found is None:
            return []
        return [(row["messageId"], {**orjson.loads(row["decision"]), "_epoch": row["epoch"], "_batch": row["batchId"]})
                for row in found.to_pylist()]


def pick(committed: Iterable[tuple[str, dict[str, Any]]], rounds: Mapping[str, str | None] | None = None,
         ) -> dict[str, Any]:
    """Of ``committed`` decisions (:meth:`DecisionTable.committed`), each message's: applied, else the parking of
    its round (``rounds``, default None for each)."""
    applied: dict[str, Any] = {}
    parked: dict[str, Any] = {}
    for mid, decision in committed:
        plain = {k: v for k, v in decision.items() if not k.startswith("_")}
        if not decision.get("parked"):
            applied.setdefault(mid, plain)
        elif decision.get("redriven") == (rounds or {}).get(mid):
            parked.setdefault(mid, plain)
    return {**parked, **applied}
