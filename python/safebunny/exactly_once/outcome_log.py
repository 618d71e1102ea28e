"""The outcome record of a row handler's batch: what the first attempt decided, read back on replay.

A row handler calls services whose answers can change; a replay must apply and publish what the
first attempt decided, so the decisions are written (durably, atomically) before anything is applied.
"""

from __future__ import annotations

import os
from typing import Any

import orjson
from pyarrow import fs as pafs

from safebunny.atomic import write_atomically
from safebunny.journal import resolve_location

__all__ = ["OutcomeLog"]


class OutcomeLog:
    """Files ``<root>/_outcomes/<node>/<epoch>/<batch>.json`` beside the inbox table."""

    def __init__(self, root: str, node: str) -> None:
        self.root = root if "://" in root else os.path.abspath(root)
        self.node = node

    def _path(self, epoch: str, batch_id: int) -> tuple[pafs.FileSystem, str]:
        filesystem, base = resolve_location(self.root, "inbox")
        return filesystem, f"{base}/_outcomes/{self.node}/{epoch}/{batch_id}.json"

    def read(self, epoch: str, batch_id: int) -> Any | None:
        filesystem, path = self._path(epoch, batch_id)
        if filesystem.get_file_info(path).type == pafs.FileType.NotFound:
            return None
        with filesystem.open_input_stream(path) as f:
            return orjson.loads(f.read())

    def write(self, epoch: str, batch_id: int, record: Any) -> None:
        filesystem, path = self._path(epoch, batch_id)
        write_atomically(filesystem, path, orjson.dumps(record, default=_jsonable))

    def forget_before(self, epoch: str, batch_id: int) -> None:
        """Remove the records of this epoch's batches before ``batch_id`` (they are committed)."""
        filesystem, path = self._path(epoch, batch_id)
        folder = path.rsplit("/", 1)[0]
        for info in filesystem.get_file_info(pafs.FileSelector(folder, allow_not_found=True)):
            stem = info.base_name.split(".", 1)[0]
            if stem.isdigit() and int(stem) < batch_id - 1:
                filesystem.delete_file(info.path)


def _jsonable(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray)):
        return value.decode("utf-8", "replace")
    return str(value)
