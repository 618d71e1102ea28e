"""The parking decisions of a saga step, committed before anything is sent and honoured by every later attempt.

A row the failure router parks (:mod:`safebunny.saga.run.failures`) sends two messages, its poison copy and, with
``fails_as``, a compensation message. So the decision is committed first, to the step's fenced decision table
(:mod:`safebunny.exactly_once.inbox.decisions`), with the batch's other decisions and before any effect or send
(``StepSettings(parks=...)``, :meth:`safebunny.saga.run.failures.FailureRouter.parkings`): of two live batches on one
message exactly one decision lands, applied or parked, and the other batch follows it. A later attempt in any epoch
(a replay, a new checkpoint, another driver) that meets the message again does not decide it again: the step
rejects it before its handler (``StepSettings(parked=...)``, :meth:`ParkedIds.recorded`) and the router parks it as
recorded, with the same copies and ids. A copy ``redrive`` sent (a new ``x-safebunny-redriven`` stamp) is decided
afresh: a parking covers the copies of its own stamp only.

A copy that arrives fresh (no ``x-safebunny-attempt`` or ``x-safebunny-redriven`` header) of a message whose poison
copy was confirmed (the parking batch's inbox marker is in: it follows the confirms) is dropped and counted as a
duplicate (``StepSettings(skip=...)``, :meth:`ParkedIds.fresh_copies`; docs/sagas.md, "Starting"); one whose copies
may not have gone out yet is parked again instead, so it reaches the poison queue.

Before parkings were committed to the table, they were a file ``<root>/poison/<unit label>.parked.json``
(``{id: {"error_type", "reason", "attempt", "redriven", "sent"}}``, or a list of ids): a file left by an older
version is still read and honoured, never written, so a message parked before an upgrade is never applied after it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from safebunny.exactly_once import FailedRow
from safebunny.exactly_once.inbox.decisions import REDRIVEN, DecisionTable, pick, rounds_of
from safebunny.saga.define.retry import ATTEMPT
from safebunny.storage.location import resolve_location
from safebunny.storage.records import read_record

__all__ = ["REDRIVEN", "ParkedIds"]

#: the reason a parked id recorded before reasons were kept is parked again with
_UNRECORDED = "parked before (its reason is in the poison queue)"


class ParkedIds:
    """The parkings of one saga step: its node's decision table (``state``, the inbox's state location), and the
    file an older version wrote for this query (``legacy``, read only)."""

    def __init__(self, legacy: str, inbox: str, node: str, state: str | None = None) -> None:
        from safebunny.exactly_once.inbox.table import decisions_location

        self.filesystem, self.path = resolve_location(legacy, "root")
        self.inbox_location, self.node = inbox, node
        self.decisions = DecisionTable(decisions_location(inbox, state), node)
        self._inbox: Any = None
        self._legacy: tuple[Any, dict[str, dict[str, Any]]] | None = None  # (file stamp, decisions)
        self._batch: tuple[frozenset[str], list[tuple[str, dict[str, Any]]]] | None = None  # the last read

    def legacy(self) -> dict[str, dict[str, Any]]:
        """The decisions of the file an older version wrote (none when there is none), read once per change."""
        from pyarrow import fs

        info = self.filesystem.get_file_info(self.path)
        if info.type == fs.FileType.NotFound:
            return {}
        stamp = (info.mtime_ns, info.size)
        if self._legacy is None or self._legacy[0] != stamp:
            data = read_record(self.filesystem, self.path)
            loaded = orjson.loads(data) if data else {}
            self._legacy = (stamp, loaded if isinstance(loaded, dict) else {str(i): {"sent": True} for i in loaded})
        return self._legacy[1]

    def _committed(self, ids: Iterable[str], fresh: bool = False) -> list[tuple[str, dict[str, Any]]]:
        """The committed decisions of ``ids``, from the batch's one read when it covered them (the step asks for
        a batch's rows in :meth:`fresh_copies`, then for its new ones in :meth:`recorded`); ``fresh``: read now."""
        wanted = frozenset(ids)
        if fresh or self._batch is None or not wanted <= self._batch[0]:
            self._batch = (wanted, self.decisions.committed(wanted))
        return [(mid, d) for mid, d in self._batch[1] if mid in wanted]

    def parkings(self, rounds: Mapping[str, str | None], fresh: bool = True) -> dict[str, dict[str, Any]]:
        """The parking each message of ``rounds`` (id -> its copy's redrive stamp) must follow: committed, or in
        the old file; none for a message that was applied or whose parking was of another round. ``fresh=False``
        answers from the batch's read (:meth:`recorded`, before the handler)."""
        picked = pick(self._committed(rounds, fresh), rounds)
        out = {mid: d for mid, d in picked.items() if d.get("parked")}
        for mid, decision in self.legacy().items():
            if mid in rounds and mid not in picked and decision.get("redriven") == rounds[mid]:
                out[mid] = decision
        return out

    def fresh_copies(self, table: pa.Table) -> pa.ChunkedArray | None:
        """Which rows of ``table`` (a batch as the source gives it) are fresh copies of ids whose poison copy was
        confirmed: the saga step's ``StepSettings(skip=...)``, so they count as duplicates; None when there are none."""
        if not table.num_rows:
            return None
        committed = self._committed(table.column("messageId").to_pylist(), fresh=True)
        legacy = self.legacy()
        if not committed and not legacy:
            return None
        sent = {mid for mid, d in legacy.items() if d.get("sent") and d.get("redriven") is None}
        batches = {(d["_epoch"], d["_batch"]) for _, d in committed if d.get("parked") and d.get("redriven") is None}
        done = {batch for batch in batches if self._inbox_table().batch_done(*batch)}
        sent |= {mid for mid, d in committed if d.get("parked") and (d["_epoch"], d["_batch"]) in done}
        if not sent:
            return None
        copy = pc.is_in(table.column("messageId"), value_set=pa.array(sorted(sent), pa.string()))
        for header in (ATTEMPT, REDRIVEN):
            copy = pc.and_(copy, pc.is_null(pc.map_lookup(table.column("headers"), header, "first")))
        return pc.fill_null(copy, False)

    def recorded(self, table: pa.Table) -> dict[str, FailedRow]:
        """The saga step's ``StepSettings(parked=...)``: of the new messages in ``table``, those a parking covers,
        as the failed rows the router parks again; they never reach the handler."""
        if not table.num_rows:
            return {}
        found = self.parkings(rounds_of(table), fresh=False)
        self._batch = None  # the batch's read is used once: a later batch (or call) reads again
        if not found:
            return {}
        correlations = (table.column("correlationId").to_pylist() if "correlationId" in table.column_names
                        else [None] * table.num_rows)
        return {mid: FailedRow(mid, found[mid].get("reason") or _UNRECORDED, 1, correlation,
                               found[mid].get("error_type"))
                for mid, correlation in zip(table.column("messageId").to_pylist(), correlations, strict=True)
                if mid in found}

    def _inbox_table(self) -> Any:
        if self._inbox is None:
            from safebunny.exactly_once.inbox.table import Inbox

            self._inbox = Inbox(self.inbox_location, self.node)
        return self._inbox
