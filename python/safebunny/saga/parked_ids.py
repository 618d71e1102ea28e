"""The parking decisions of a step, recorded before anything is sent and honoured by every later attempt.

A row the failure router parks (:mod:`safebunny.saga.failures`) sends two messages, its poison copy and, with
``fails_as``, a compensation message. So the decision is recorded here *before* they are published, and a later
attempt in any epoch (a replay, a new checkpoint, another driver) that meets the message again does not decide
it again: the step rejects it before its handler (``StepSettings(parked=...)``, :meth:`ParkedIds.recorded`) and
the router parks it as recorded, with the same copies and ids. Without that, a crash between the copies and the inbox
marker, then a redelivery that now succeeds (the service is back), applied an order whose instance was compensated
(issue 48, item 3). A copy ``redrive`` sent (a new ``x-safebunny-redriven`` stamp) is decided afresh: that is what
redrive asks for.

A copy that arrives fresh (no ``x-safebunny-attempt`` or ``x-safebunny-redriven`` header) of a message whose poison
copy was confirmed is dropped and counted as a duplicate (``StepSettings(skip=...)``, :meth:`ParkedIds.fresh_copies`;
docs/sagas.md, "Starting"); one whose copies may not have gone out yet (a crash between the record and the
confirms) is parked again instead, so it reaches the poison queue.

The file ``<root>/poison/<unit label>.parked.json`` (one per query: a copy of an instance goes to the same shard as
its first) holds ``{id: {"error_type", "reason", "attempt", "redriven", "sent"}}``, written whole and atomically; a
list of ids (the format before) reads as sent decisions without a reason.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from safebunny.amqp.message_rows import as_text
from safebunny.exactly_once import FailedRow
from safebunny.saga.retry import ATTEMPT
from safebunny.storage.location import resolve_location
from safebunny.storage.writes import write_atomically

__all__: list[str] = []

#: the header ``redrive`` sets on the copies it sends back
REDRIVEN = "x-safebunny-redriven"
#: the reason a parked id recorded before reasons were kept is parked again with
_UNRECORDED = "parked before (its reason is in the poison queue)"


class ParkedIds:
    """The parking decisions of one query of a saga (a file under its root)."""

    def __init__(self, location: str) -> None:
        self.filesystem, self.path = resolve_location(location, "root")
        # (file stamp, decisions, the sent ids and all ids as Arrow sets, built once per change)
        self._cache: tuple[Any, dict[str, dict[str, Any]], pa.Array, pa.Array] | None = None
        self._read: Mapping[str, Mapping[str, Any]] | None = None  # what the last read() found

    def read(self, again: bool = True) -> Mapping[str, Mapping[str, Any]]:
        """Every recorded decision, by message id. ``again=False`` answers from the last read when there was one:
        :meth:`recorded` reads what :meth:`fresh_copies` read for the same batch (the step calls both, skip first),
        so a batch looks at the file once, not twice."""
        from pyarrow import fs

        if not again and self._read is not None:
            return self._read
        info = self.filesystem.get_file_info(self.path)
        if info.type == fs.FileType.NotFound:
            self._read = {}
            return self._read
        stamp = (info.mtime_ns, info.size)
        if self._cache is None or self._cache[0] != stamp:
            with self.filesystem.open_input_stream(self.path) as f:
                data = f.read()
            loaded = orjson.loads(data) if data else {}
            decisions = loaded if isinstance(loaded, dict) else {str(i): {"sent": True} for i in loaded}
            sent = sorted(mid for mid, d in decisions.items() if d.get("sent"))
            self._cache = (stamp, decisions, pa.array(sent, pa.string()), pa.array(sorted(decisions), pa.string()))
        self._read = self._cache[1]
        return self._read

    def fresh_copies(self, table: pa.Table) -> pa.ChunkedArray | None:
        """Which rows of ``table`` (a batch as the source gives it) are fresh copies of ids whose poison copy was
        confirmed: the saga step's ``StepSettings(skip=...)``, so they count as duplicates; None when there are none."""
        if not self.read():
            return None
        assert self._cache is not None  # read() found decisions, so it cached them
        copy = pc.is_in(table.column("messageId"), value_set=self._cache[2])
        for header in (ATTEMPT, REDRIVEN):
            copy = pc.and_(copy, pc.is_null(pc.map_lookup(table.column("headers"), header, "first")))
        return pc.fill_null(copy, False)

    def honoured(self, message_id: str, headers: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
        """The recorded parking that a copy of ``message_id`` with ``headers`` must follow, or None (not parked, or
        sent again by a redrive after it was)."""
        return _follow(self.read().get(message_id), headers)

    def recorded(self, table: pa.Table) -> dict[str, FailedRow]:
        """The saga step's ``StepSettings(parked=...)``: of the new messages in ``table``, those a recorded parking
        covers, as the failed rows the router parks again; they never reach the handler."""
        decisions = self.read(again=False)
        if not table.num_rows or not decisions:
            return {}
        assert self._cache is not None  # read() found decisions, so it cached them
        table = table.filter(pc.fill_null(pc.is_in(table.column("messageId"), value_set=self._cache[3]), False))
        out: dict[str, FailedRow] = {}  # only the rows of recorded ids are read as Python values
        headers = table.column("headers").to_pylist() if "headers" in table.column_names else [None] * table.num_rows
        correlations = (table.column("correlationId").to_pylist() if "correlationId" in table.column_names
                        else [None] * table.num_rows)
        for mid, pairs, correlation in zip(table.column("messageId").to_pylist(), headers, correlations,
                                           strict=True):
            decision = _follow(decisions.get(mid), dict(pairs or ()))
            if decision is not None:
                out[mid] = FailedRow(mid, decision.get("reason") or _UNRECORDED, 1, correlation,
                                     decision.get("error_type"))
        return out

    def record(self, decisions: Mapping[str, Mapping[str, Any]]) -> None:
        """Record parking ``decisions`` (before their copies are published); one already recorded stays as it is."""
        known = self.read()
        new = {mid: {**d, "sent": False} for mid, d in decisions.items()
               if known.get(mid, {}).get("redriven", False) != d.get("redriven")}
        if new:
            self._write({**known, **new})

    def mark_sent(self, ids: Iterable[str]) -> None:
        """Note that the copies of ``ids``' parkings were confirmed (fresh copies of them now count as duplicates)."""
        known = self.read()
        unsent = {mid for mid in ids if mid in known and not known[mid].get("sent")}
        if unsent:
            self._write({**known, **{mid: {**known[mid], "sent": True} for mid in unsent}})

    def _write(self, decisions: Mapping[str, Mapping[str, Any]]) -> None:
        write_atomically(self.filesystem, self.path, orjson.dumps(decisions, option=orjson.OPT_SORT_KEYS))
        self._cache = self._read = None


def _follow(decision: Mapping[str, Any] | None, headers: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """``decision`` when a copy with ``headers`` must follow it: not when a redrive sent it after the parking."""
    if decision is None or decision.get("redriven") != as_text((headers or {}).get(REDRIVEN)):
        return None
    return decision
