"""Claims: what a batch is about to apply, written down before its first Delta effect.

The inbox append is the marker "every effect of batch (E, N) is done". A driver that dies after
some effects of (E, N) and before that marker leaves effects without a marker. Restarted from the
same checkpoint, the replay of (E, N) is stopped by the effects' own app transactions (E, N). But
with a new checkpoint (a new epoch E'), or on another driver, the broker redelivers those messages
into a batch of E', whose app transactions know nothing of E: without more, the effects apply twice.

So before its effects a batch writes a claim: its epoch, its batch id, the ids of its new messages
and the effect targets it will write. The claim is removed once the inbox marker is committed. A
claim whose marker never came is an *orphan*; a later batch that meets its ids asks each target's
table whether (E, N) was applied there (the app transaction of (node, E, target) is at N or beyond;
the dead epoch writes no later version) and leaves those ids' rows out of that target only. Every
id then ends applied once per target, and the later batch's own inbox marker covers it. Emits are
published again with their derived ids; the next step's inbox drops the copies.

Files: ``<root>/_claims/<node>/<epoch>@<batch>.json`` beside the inbox, one per batch with effects.
Listing that folder once per batch is the whole cost when nothing crashed (it holds only the batch
under way).
"""

from __future__ import annotations

import datetime as dt
import time
import urllib.parse
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import orjson
import pyarrow as pa
import pyarrow.compute as pc
from pyarrow import fs as pafs

from safebunny.atomic import write_atomically
from safebunny.journal import resolve_location

__all__ = ["Claim", "ClaimLog", "Target", "settle", "leave_out", "expired"]

#: An effect target as the claim records it: (kind, table, key columns), :attr:`Effect.key`.
Target = tuple[str, str, tuple[str, ...]]


@dataclass(frozen=True)
class Claim:
    """Batch ``(epoch, batch_id)`` is about to apply ``targets`` for ``ids``."""

    epoch: str
    batch_id: int
    ids: frozenset[str]
    targets: tuple[Target, ...]
    written_at: float  # unix seconds

    def to_json(self) -> bytes:
        return orjson.dumps({"epoch": self.epoch, "batchId": self.batch_id, "ids": sorted(self.ids),
                             "targets": [[k, t, list(on)] for k, t, on in self.targets],
                             "writtenAt": self.written_at})

    @classmethod
    def from_json(cls, data: bytes) -> Claim:
        raw = orjson.loads(data)
        return cls(raw["epoch"], int(raw["batchId"]), frozenset(raw["ids"]),
                   tuple((k, t, tuple(on)) for k, t, on in raw["targets"]), float(raw["writtenAt"]))


class ClaimLog:
    """The claims of one node, under ``<root>/_claims/<node>/`` (``root``: the inbox's path or name)."""

    def __init__(self, root: str, node: str) -> None:
        self.filesystem, base = resolve_location(root, "inbox")
        self.folder = f"{base}/_claims/{urllib.parse.quote(node, safe='')}"

    def _path(self, epoch: str, batch_id: int) -> str:
        return f"{self.folder}/{urllib.parse.quote(epoch, safe='')}@{batch_id}.json"

    def write(self, epoch: str, batch_id: int, ids: Iterable[str], targets: Iterable[Target]) -> Claim:
        claim = Claim(epoch, batch_id, frozenset(ids), tuple(sorted(targets)), time.time())
        write_atomically(self.filesystem, self._path(epoch, batch_id), claim.to_json())
        return claim

    def remove(self, epoch: str, batch_id: int) -> None:
        try:
            self.filesystem.delete_file(self._path(epoch, batch_id))
        except FileNotFoundError:
            pass

    def others(self, epoch: str, batch_id: int) -> list[Claim]:
        """Every claim on file but ``(epoch, batch_id)``'s own, oldest first."""
        mine = self._path(epoch, batch_id).rsplit("/", 1)[1]
        selector = pafs.FileSelector(self.folder, allow_not_found=True)
        claims = []
        for info in self.filesystem.get_file_info(selector):
            if info.type != pafs.FileType.File or not info.base_name.endswith(".json") or info.base_name == mine:
                continue
            try:
                with self.filesystem.open_input_stream(info.path) as f:
                    claims.append(Claim.from_json(f.read()))
            except FileNotFoundError:  # removed by its own batch while we listed
                continue
        return sorted(claims, key=lambda c: (c.written_at, c.epoch, c.batch_id))


def settle(orphans: Sequence[Claim], new_ids: Iterable[str],
           applied: Callable[[Claim, Target], bool]) -> dict[Target, set[str]]:
    """For each target, the new ids whose effect an orphaned batch already applied there.

    ``applied(claim, target)`` answers from the target table's app transaction. Only targets an
    orphan recorded and ids the orphan claimed count; everything else is applied as usual.
    """
    new = set(new_ids)
    out: dict[Target, set[str]] = {}
    for claim in orphans:
        mine = claim.ids & new
        if not mine:
            continue
        for target in claim.targets:
            if applied(claim, target):
                out.setdefault(target, set()).update(mine)
    return out


def leave_out(table: pa.Table, ids: set[str]) -> pa.Table:
    """``table`` without the rows whose ``messageId`` is in ``ids``."""
    if not ids or table.num_rows == 0:
        return table
    keep = pc.invert(pc.is_in(table.column("messageId"), value_set=pa.array(sorted(ids), pa.string())))
    return table.filter(pc.fill_null(keep, True))


def expired(claim: Claim, window: dt.timedelta, now: float | None = None) -> bool:
    """A claim older than the dedupe window: its ids would be processed again anyway."""
    return (now if now is not None else time.time()) - claim.written_at > window.total_seconds()
