"""A DataFrame handler's outcome recorded before any of it is applied or sent, read back by a replay instead of
running the handler again.

``StepSettings(record_frame_outcomes=True)``, the default.

A DataFrame handler that reads a table that changes, the clock or randomness gives a replay other effect rows and
other emits than the first attempt; the first attempt's effects may be applied and its emits sent already. So the
step writes what the handler decided, the effect and emit rows (Arrow, types kept) with the ids it covers and the
rows it failed, to ``<state>/_frames/<node>/<epoch>/<batch>.arrows`` (written whole: :mod:`safebunny.storage.writes`)
right after the handler ran: before the batch's claim, its effects and its publish. A batch then takes, per message:

- its own record (a replay of ``(epoch, batch)``, with the same checkpoint): every id it covers, failed ones too;
- else an orphaned batch's (a claim of another epoch, or another driver, whose marker is not in: the claim names
  the ids that batch decided and may have applied or sent): its rows for those ids, never a failed one (a failure
  applied and sent nothing, so the message is decided again);
- else the handler runs on the messages left, and the whole outcome is recorded before going on.

Why that is exact, and what it costs: docs/exactly-once.md ("Recorded DataFrame outcomes"). :func:`encode`,
:func:`decode` and :func:`only` are pure pyarrow, tested without Spark.
"""

from __future__ import annotations

import struct
import urllib.parse
from collections.abc import Callable, Collection, Sequence
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from safebunny.crashpoints import crash_point
from safebunny.errors import SafeBunnyError
from safebunny.exactly_once.claims.batch_claims import BatchClaims
from safebunny.exactly_once.collect.batch import NewMessages
from safebunny.exactly_once.collect.materialize import Materialized, merge_all
from safebunny.exactly_once.outcome import Effect, Emit, FailedRow, StepContext
from safebunny.storage.location import resolve_under
from safebunny.storage.records import list_records, read_record, remove_record
from safebunny.storage.writes import write_atomically

__all__ = ["FrameRecords", "Recorded", "decode", "encode", "only"]

_MAGIC = b"SBFRAME1"
#: (the ids a record covers, in source order; the outcome it holds for them)
Recorded = tuple[list[str], Materialized]


def encode(ids: Sequence[str], outcome: Materialized) -> list[Any]:
    """A record's parts, to be written one after another: a JSON manifest (the ids covered, the failed rows, each
    effect's and emit's target and its table's length) then each table as an Arrow IPC stream."""
    items, blobs = [], []
    for role, entries in (("effect", outcome.effects), ("emit", outcome.emits)):
        for item, table in entries.values():
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, table.schema) as writer:
                writer.write_table(table)
            blob = sink.getvalue()
            blobs.append(blob)
            target = ({"kind": item.kind, "table": item.table, "on": list(item.on)} if role == "effect" else
                      {"type": item.type, "exchange": item.exchange, "routing_key": item.routing_key})
            items.append({"role": role, **target, "bytes": blob.size})
    failed = [[f.message_id, f.reason, f.attempts, f.correlation_id, f.error_type] for f in outcome.failed.values()]
    manifest = orjson.dumps({"ids": list(ids), "failed": failed, "items": items})
    return [_MAGIC, struct.pack(">Q", len(manifest)), manifest, *blobs]


def decode(data: bytes, where: str = "a record") -> Recorded:
    """The ids and outcome :func:`encode` wrote."""
    if not data.startswith(_MAGIC):
        raise SafeBunnyError(f"{where} is not a safebunny DataFrame outcome record (it does not start with "
                             f"{_MAGIC!r}); remove it only if no batch of its step is under way.")
    start = len(_MAGIC) + 8
    (size,) = struct.unpack(">Q", data[len(_MAGIC):start])
    manifest = orjson.loads(data[start:start + size])
    out, offset = Materialized(), start + size
    for entry in manifest["items"]:
        table = pa.ipc.open_stream(pa.py_buffer(data[offset:offset + entry["bytes"]])).read_all()
        offset += entry["bytes"]
        if entry["role"] == "effect":
            effect = Effect(entry["kind"], None, entry["table"], tuple(entry["on"]))
            out.effects[effect.key] = (effect, table)
        else:
            item = Emit(None, entry["type"], entry["exchange"], entry["routing_key"])
            out.emits[item.key] = (item, table)
    out.failed = {f[0]: FailedRow(f[0], f[1], f[2], f[3], f[4]) for f in manifest["failed"]}
    return list(manifest["ids"]), out


def only(outcome: Materialized, ids: Collection[str], failed: bool = True) -> Materialized:
    """The part of ``outcome`` that ``ids`` caused: their effect and emit rows, and (with ``failed``) their
    failed rows."""
    wanted = sorted(ids)
    out = Materialized()
    for target, source in ((out.effects, outcome.effects), (out.emits, outcome.emits)):
        for key, (item, table) in source.items():
            column = table.column("messageId")
            keep = pc.fill_null(pc.is_in(column, value_set=pa.array(wanted, column.type)), False)
            target[key] = (item, table.filter(keep))
    if failed:
        out.failed = {mid: row for mid, row in outcome.failed.items() if mid in ids}
    return out


class FrameRecords:
    """The recorded DataFrame outcomes of one step, beside its claims (``claimed``)."""

    def __init__(self, claimed: BatchClaims) -> None:
        self.claimed = claimed
        self.filesystem, self.folder = resolve_under(claimed.inbox.state, "state", "_frames",
                                                     urllib.parse.quote(claimed.node, safe=""))

    def _path(self, epoch: str, batch_id: int) -> str:
        return f"{self.folder}/{urllib.parse.quote(epoch, safe='')}/{batch_id}.arrows"

    def read(self, epoch: str, batch_id: int) -> Recorded | None:
        path = self._path(epoch, batch_id)
        data = read_record(self.filesystem, path)
        return None if data is None else decode(data, f"The file {path!r}")

    def write(self, epoch: str, batch_id: int, ids: Sequence[str], outcome: Materialized) -> None:
        parts = encode(ids, outcome)

        def write(stream: Any) -> None:  # the Arrow buffers as they are, no copy joined in memory
            for part in parts:
                stream.write(part)

        write_atomically(self.filesystem, self._path(epoch, batch_id), write)

    def run(self, new: NewMessages, ctx: StepContext, compute: Callable[[NewMessages], Materialized]) -> Materialized:
        """The outcome of the handler on ``new``: what the records hold for its messages (the module's rules), the
        rest from ``compute`` (the handler run on them), recorded whole before it is returned."""
        if not new.count:
            return Materialized()
        recorded, covered, own = self._recalled(ctx, new.ids)
        left = [position for position, mid in enumerate(new.ids) if mid not in covered]
        if own and not left:
            return recorded
        if len(left) == new.count:  # nothing recorded for these messages (the usual case): the handler gets them all
            outcome = compute(new)
        else:
            outcome = merge_all([recorded, compute(new.subset(left))]) if left else recorded
        self.write(ctx.epoch, ctx.batch_id, new.ids, outcome)  # whole, before the claim that names its ids
        crash_point("step.after_frame_record")
        return outcome

    def _recalled(self, ctx: StepContext, ids: list[str]) -> tuple[Materialized, set[str], bool]:
        """What this batch's own record holds for ``ids``, else the records of orphaned batches that claimed them;
        the ids so covered, and whether the batch's own record was there."""
        wanted = set(ids)
        own = self.read(ctx.epoch, ctx.batch_id)
        if own is not None:
            covered = wanted & set(own[0])
            return only(own[1], covered), covered, True
        parts, covered = [], set()
        for claim in self.claimed.claims.others(ctx.epoch, ctx.batch_id):
            take = (claim.ids & wanted) - covered
            if not take or self.claimed.inbox.batch_done(claim.epoch, claim.batch_id):
                continue
            record = self.read(claim.epoch, claim.batch_id)
            if record is None:  # a claim of a step that did not record, or of a batch of another handler
                continue
            take &= set(record[0]) - set(record[1].failed)
            parts.append(only(record[1], take, failed=False))
            covered |= take
        return merge_all(parts), covered, False

    def forget(self, epoch: str, batch_id: int) -> None:
        """Remove ``(epoch, batch_id)``'s record (its claim is retired: every id it held is done)."""
        remove_record(self.filesystem, self._path(epoch, batch_id))

    def forget_before(self, epoch: str, batch_id: int) -> None:
        """Remove this epoch's records of batches before ``batch_id - 1``: Spark committed them (a replay of the
        batch before this one, whose commit may not be in yet, keeps its record)."""
        folder = self._path(epoch, batch_id).rsplit("/", 1)[0]
        for info in list_records(self.filesystem, folder, ".arrows"):
            stem = info.base_name.split(".", 1)[0]
            if stem.isdigit() and int(stem) < batch_id - 1:
                remove_record(self.filesystem, info.path)
