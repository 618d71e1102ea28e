"""A batch's claim file, what it is about to apply, written down before its first Delta effect.

A claim holds the batch's epoch and id and, per effect target, the ids it is about to write there (for a row
handler, the ids it decided); it is removed once the inbox marker is committed. A later batch that meets an
orphan's ids leaves out, per target, only those the orphan applied there. Why and how: docs/exactly-once.md
("Across epochs: the batch claim").

Files: ``<state>/_claims/<node>/<epoch>@<batch>.json`` in the step's state location (by default the inbox's
folder: :func:`~safebunny.exactly_once.inbox.table.state_location`), one per batch with effects or
decisions. Listing that folder once per batch is the whole cost when nothing crashed (it holds only the
batch under way).
"""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson
import pyarrow as pa

from safebunny.exactly_once.claims.fence import SCHEME
from safebunny.storage.location import resolve_under
from safebunny.storage.records import list_records, read_records, remove_record
from safebunny.storage.writes import write_atomically

__all__ = ["Claim", "ClaimLog", "applied_ids"]

#: An effect target as the claim records it: (kind, table, key columns), :attr:`Effect.key`.
Target = tuple[str, str, tuple[str, ...]]


@dataclass(frozen=True)
class Claim:
    """Batch ``(epoch, batch_id)`` is about to apply ``applied[target]`` to each target, and has decided ``ids``.

    ``ids``: every id the batch applies or decided (never a failed one); ``applied``: per target, the ids
    with rows there. A claim written by an older version (targets without ids) counts every id for every
    target, as that version did.
    """

    epoch: str
    batch_id: int
    ids: frozenset[str]
    applied: Mapping[Target, frozenset[str]]
    written_at: float  # unix seconds
    #: how its batch writes effects: 1, version N (no fences); 2, version 2N + 1 (:mod:`.fence`)
    scheme: int = SCHEME

    @property
    def targets(self) -> tuple[Target, ...]:
        return tuple(sorted(self.applied))

    def to_json(self) -> bytes:
        return orjson.dumps({"epoch": self.epoch, "batchId": self.batch_id, "ids": sorted(self.ids),
                             "targets": [[k, t, list(on), sorted(self.applied[(k, t, on)])]
                                         for k, t, on in self.targets],
                             "writtenAt": self.written_at, "scheme": self.scheme})

    @classmethod
    def from_json(cls, data: bytes) -> Claim:
        raw = orjson.loads(data)
        ids = frozenset(raw["ids"])
        applied = {(entry[0], entry[1], tuple(entry[2])): frozenset(entry[3]) if len(entry) > 3 else ids
                   for entry in raw["targets"]}
        return cls(raw["epoch"], int(raw["batchId"]), ids, applied, float(raw["writtenAt"]), int(raw.get("scheme", 1)))


class ClaimLog:
    """The claims of one node, under ``<root>/_claims/<node>/`` (``root``: the step's state location)."""

    def __init__(self, root: str, node: str) -> None:
        self.filesystem, self.folder = resolve_under(root, "state", "_claims", urllib.parse.quote(node, safe=""))

    def _path(self, epoch: str, batch_id: int) -> str:
        return f"{self.folder}/{urllib.parse.quote(epoch, safe='')}@{batch_id}.json"

    def write(self, epoch: str, batch_id: int, ids: Iterable[str],
              applied: Mapping[Target, Iterable[str]] | None = None) -> Claim:
        """Write ``(epoch, batch_id)``'s claim: the ids it decided, and per target the ids it applies there."""
        per_target = {target: frozenset(mids) for target, mids in (applied or {}).items()}
        claim = Claim(epoch, batch_id, frozenset(ids).union(*per_target.values()), per_target, time.time())
        write_atomically(self.filesystem, self._path(epoch, batch_id), claim.to_json())
        return claim

    def remove(self, epoch: str, batch_id: int) -> None:
        remove_record(self.filesystem, self._path(epoch, batch_id))

    def others(self, epoch: str, batch_id: int) -> list[Claim]:
        """Every claim on file but ``(epoch, batch_id)``'s own, oldest first."""
        mine = self._path(epoch, batch_id).rsplit("/", 1)[1]
        files = [info for info in list_records(self.filesystem, self.folder, ".json") if info.base_name != mine]
        claims = read_records(self.filesystem, files, Claim.from_json)  # one removed by its own batch: left out
        return sorted(claims, key=lambda c: (c.written_at, c.epoch, c.batch_id))


def applied_ids(handled: Mapping[Any, tuple[Any, pa.Table]], written: Mapping[Any, tuple[Any, pa.Table]],
                failed: Collection[str]) -> dict[Target, set[str]]:
    """Per target a batch writes (``written``: its settled effects), the ids it applies there: the ids with
    rows in the handler's tables (``handled``, before a merge kept one row per key: a superseded row is
    applied by the same commit), never a ``failed`` id."""
    targets = {item.key for item, _table in written.values()}
    out: dict[Target, set[str]] = {}
    for item, table in handled.values():
        if item.key in targets:
            ids = {mid for mid in table.column("messageId").to_pylist() if mid is not None}
            out.setdefault(item.key, set()).update(ids - set(failed))
    return out
