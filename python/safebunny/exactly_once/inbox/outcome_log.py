"""The outcome record of a row handler's batch: what the first attempt decided, read back on replay.

A row handler calls services whose answers can change; a replay must apply and publish what the
first attempt decided, so the decisions are written (durably, atomically) before anything is applied.
"""

from __future__ import annotations

from typing import Any

import orjson
from pyarrow import fs as pafs

from safebunny.storage.location import absolute_location, resolve_under
from safebunny.storage.records import list_records, read_record, remove_record
from safebunny.storage.writes import write_atomically

__all__ = ["OutcomeLog"]


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
