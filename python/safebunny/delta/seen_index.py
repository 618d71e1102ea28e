"""A driver-side index of one node's processed ids, so the inbox look-up costs O(batch), not O(window).

A sorted array of 64-bit hashes of the ``done`` ids in the node's active files, with the file each came
from; new files are read as they appear, and it is rebuilt when a file it indexed is gone. A hash hit is
confirmed by reading just the files that hold it with the exact filter, so it never drops a message by
itself; no hit, no data read (docs/performance.md, the inbox look-up). Whenever it cannot be sure (deletion
vectors, a file it cannot read), :meth:`SeenIndex.lookup` returns ``None`` and the caller scans.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Sequence
from typing import Any
from urllib.parse import unquote

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads

__all__ = ["SeenIndex", "id_hashes"]

log = logging.getLogger("safebunny.inbox")


def id_hashes(ids: Sequence[str]) -> np.ndarray:
    """64-bit hashes of message ids: Python's own string hash (SipHash, keyed per process, which is
    enough for an index that lives in one process and confirms every hit), as int64."""
    return np.fromiter((hash(mid) for mid in ids), dtype=np.int64, count=len(ids))


class SeenIndex:
    """The ``done`` ids of ``node`` in the inbox at ``delta``, as sorted hashes with their files."""

    def __init__(self, delta: Any, node: str) -> None:  # a DeltaRsTarget, which imports this module
        self.delta = delta
        self.node = node
        self._hashes = np.empty(0, np.int64)
        self._file_of = np.empty(0, np.int32)  # index into self._paths, parallel to self._hashes
        self._paths: list[str] = []
        self._known: set[str] = set()
        self.rebuilds = 0

    def __len__(self) -> int:
        return len(self._hashes)

    # -- keeping up with the table ---------------------------------------------------------------
    def _active_files(self, table: Any, since: dt.date) -> list[str] | None:
        protocol = table.protocol()
        if "deletionVectors" in (protocol.reader_features or []):
            return None  # rows of a file may be deleted without the file going: reading it is not enough
        actions = pa.table(table.get_add_actions(flatten=True))
        mine = pc.and_(pc.equal(actions.column("partition.node"), self.node),
                       pc.greater_equal(actions.column("partition.processedDate"), since.isoformat()))
        # The log's paths are URIs (the Delta protocol): a partition directory named ``node=caf%C3%A9``
        # on disk is ``node=caf%25C3%25A9`` there. Decode once to get the file's path.
        return [unquote(path) for path in actions.filter(mine).column("path").to_pylist()]

    def _read(self, paths: Sequence[str], columns: Sequence[str]) -> pa.Table:
        dataset = pads.dataset(list(paths), schema=_FILE_SCHEMA, format="parquet",
                               filesystem=self.delta.filesystem())
        return dataset.to_table(columns=list(columns))

    def refresh(self, table: Any, since: dt.date) -> bool:
        """Index the node's files not indexed yet (rebuild when one indexed is gone); False when the
        index cannot be trusted for this table."""
        active = self._active_files(table, since)
        if active is None:
            return False
        current = set(active)
        if self._known - current:  # compaction or retention removed a file: start over
            self._hashes, self._file_of, self._paths, self._known = (np.empty(0, np.int64), np.empty(0, np.int32),
                                                                     [], set())
            self.rebuilds += 1
        new = [p for p in active if p not in self._known]
        if new:
            hashes, files = [], []
            for path in new:
                part = self._read([path], ["messageId", "status"])
                done = part.filter(pc.equal(part.column("status"), "done")).column("messageId").to_pylist()
                hashes.append(id_hashes(done))
                files.append(np.full(len(done), len(self._paths), np.int32))
                self._paths.append(path)
            self._insert(np.concatenate(hashes), np.concatenate(files))
            self._known |= set(new)
        return True

    def _insert(self, hashes: np.ndarray, files: np.ndarray) -> None:
        order = np.argsort(hashes, kind="stable")
        hashes, files = hashes[order], files[order]
        at = np.searchsorted(self._hashes, hashes)
        self._hashes = np.insert(self._hashes, at, hashes)
        self._file_of = np.insert(self._file_of, at, files)

    # -- looking up ------------------------------------------------------------------------------
    def lookup(self, message_ids: Sequence[str], since: dt.date, epoch: str, batch_id: int) -> set[str] | None:
        """The ids among ``message_ids`` this node has done within the window, except batch
        ``(epoch, batch_id)``'s own rows; ``None`` when the caller must scan instead."""
        table = self.delta.handle()
        if table is None:
            return set()
        try:
            if not self.refresh(table, since):
                return None
            wanted = id_hashes(message_ids)
            left = np.searchsorted(self._hashes, wanted, side="left")
            right = np.searchsorted(self._hashes, wanted, side="right")
            hit = right > left
            if not hit.any():
                return set()
            candidates = [mid for mid, h in zip(message_ids, hit, strict=True) if h]
            paths = sorted({self._paths[f] for lo, hi in zip(left[hit], right[hit], strict=True)
                            for f in self._file_of[lo:hi]})
            field = pc.field
            flt = ((field("status") == "done") & field("messageId").isin(pa.array(candidates, pa.string()))
                   & ~((field("epoch") == epoch) & (field("batchId") == batch_id)))
            found = self._read(paths, ["messageId", "status", "epoch", "batchId"]).filter(flt)
            return set(found.column("messageId").to_pylist())
        except Exception as exc:  # noqa: BLE001 - the scan is always a correct answer
            log.warning("inbox index of node %r could not be used (%s); scanning the inbox instead", self.node, exc)
            self.__init__(self.delta, self.node)  # type: ignore[misc]  # start over next time
            return None


#: The columns the index reads from a data file (partition columns are not in the files).
_FILE_SCHEMA = pa.schema([("messageId", pa.string()), ("status", pa.string()), ("epoch", pa.string()),
                          ("batchId", pa.int64())])
