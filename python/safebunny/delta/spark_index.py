"""A driver-side index of one node's processed ids in an inbox on Spark Delta (a table by name), kept fresh from the
table's new commits, so the look-up reads no rows when nothing in the batch was seen before.

The index is a sorted array of 64-bit hashes of the node's ``done`` ids, as of a table version. It is built with
one scan of the node's partitions in the window, the version read (from the history) before that scan; then, at
each look-up, the history's commits after that version are read (:mod:`.spark_history`: only the new ones) and each
is accounted for: an inbox marker of this node whose rows this process recorded adds those ids; one written
elsewhere (another shard or driver) is read by its ``(epoch, batchId)``; another node's marker, a compaction or a
delete adds nothing (a delete leaves hashes of ids that are gone: a hit is confirmed anyway); any other commit
rebuilds the index. So the index holds every done id of the node in the table (and maybe more). A hash hit is
confirmed by reading those ids from the table with the exact filter before anything is dropped; no hit, no read.
It never decides by itself: whatever it cannot account for sends it back to a scan.

Pure apart from its table (:class:`IndexedTable`, which :class:`~safebunny.delta.spark_inbox.SparkInbox`
is): the reads of rows and history are the table's, so this module is tested without Spark.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from safebunny.delta.commit_tags import applied_in_history, parse_tag
from safebunny.delta.seen_index import id_hashes
from safebunny.delta.spark_history import Entry

__all__ = ["SparkSeenIndex", "IndexedTable", "INBOX_APP_PREFIX", "marker_in"]

#: an inbox marker's app id is ``safebunny.inbox.<node>.<epoch>`` (a node name holds no ``.``)
INBOX_APP_PREFIX = "safebunny.inbox."
#: commits that add no row to the inbox (a delete may remove some: the index keeps their hashes, hits are confirmed)
_NO_NEW_ROWS = {"OPTIMIZE", "DELETE", "VACUUM START", "VACUUM END", "SET TBLPROPERTIES", "UNSET TBLPROPERTIES"}
#: the commits of other writers read in one scan at most (more: rebuild)
_MAX_FOREIGN = 32


class IndexedTable(Protocol):
    """What the index reads of its inbox table."""

    def history_entries(self) -> list[Entry]:
        """The table's whole history, newest first (empty without a table)."""
        ...

    def done_ids(self, node: str, since: dt.date, batches: Sequence[tuple[str, int]] | None = None) -> list[str]:
        """The ``done`` ids of ``node`` processed since ``since`` (only of the batches ``(epoch, batchId)``)."""
        ...

    def seen_by_scan(self, node: str, since: dt.date, message_ids: Sequence[str], epoch: str,
                     batch_id: int) -> set[str]:
        """The ids among ``message_ids`` done for ``node`` since ``since``, but for batch ``(epoch, batch_id)``'s."""
        ...


class SparkSeenIndex:
    """The ``done`` ids of ``node`` in the inbox ``target`` (a table on Spark Delta)."""

    def __init__(self, target: IndexedTable, node: str) -> None:
        self.target = target
        self.node = node
        self._hashes = np.empty(0, np.int64)
        self._version = -1  # the table version the index is complete for; -1: not built
        self._since: dt.date | None = None
        self._recorded: dict[tuple[str, int], list[str]] = {}  # (epoch, batchId) -> done ids this process appended
        self._lock = threading.Lock()
        self.builds = 0
        self.foreign_reads = 0
        #: the history the last look-up read, and for which batch: "is that batch done" may be answered from it
        self._last_read: tuple[tuple[str, int], list[Entry]] | None = None

    def __len__(self) -> int:
        return len(self._hashes)

    def recorded(self, epoch: str, batch_id: int, done_ids: Sequence[str]) -> None:
        """This process is appending ``done_ids`` as batch ``(epoch, batch_id)``'s marker: when that commit shows up
        in the history, its ids need no read."""
        with self._lock:
            self._recorded[(epoch, batch_id)] = list(done_ids)

    def history_read_for(self, epoch: str, batch_id: int) -> list[Entry] | None:
        """The history the look-up of batch ``(epoch, batch_id)`` just read (once; None when the last look-up was of
        another batch): only the batch itself writes its marker, and a marker once in stays in, so whether that
        batch is done reads there as well as in a new read."""
        with self._lock:
            last, self._last_read = self._last_read, None
        return last[1] if last is not None and last[0] == (epoch, batch_id) else None

    def lookup(self, message_ids: Sequence[str], since: dt.date, epoch: str, batch_id: int) -> set[str]:
        """The ids among ``message_ids`` this node has done within the window, except batch ``(epoch, batch_id)``'s
        own rows: read from the table for the index's hits only."""
        with self._lock:
            history = self.target.history_entries()
            self._last_read = ((epoch, batch_id), history)
            if not history:
                self._reset()
                return set()
            self._refresh(history, since)
            wanted = id_hashes(message_ids)
            at = np.searchsorted(self._hashes, wanted)
            hit = ((at < len(self._hashes)) & (self._hashes[np.minimum(at, len(self._hashes) - 1)] == wanted)
                   if len(self._hashes) else np.zeros(len(wanted), bool))
        if not hit.any():
            return set()
        candidates = [mid for mid, h in zip(message_ids, hit, strict=True) if h]
        return self.target.seen_by_scan(self.node, since, candidates, epoch, batch_id)

    # -- keeping up with the table ---------------------------------------------------------------
    def _reset(self) -> None:
        self._hashes, self._version, self._since = np.empty(0, np.int64), -1, None

    def _refresh(self, history: list[Entry], since: dt.date) -> None:
        newest = history[0][0]
        if self._version < 0 or since != self._since:  # first, or the window moved
            self._build(newest, since)
            return
        new = [entry for entry in history if entry[0] > self._version]
        if not new:
            return
        if min(entry[0] for entry in new) != self._version + 1 or len(new) != newest - self._version:
            self._build(newest, since)  # a gap: commits the history cannot show
            return
        added: list[np.ndarray] = []
        foreign: list[tuple[str, int]] = []
        for _version, _at, tag, operation in new:
            mine = self._marker(tag)
            if mine is None:
                if operation in _NO_NEW_ROWS or _other_node(tag):
                    continue
                self._build(newest, since)
                return
            ids = self._recorded.pop(mine, None)
            if ids is None:
                foreign.append(mine)
            else:
                added.append(id_hashes(ids))
        if len(foreign) > _MAX_FOREIGN:
            self._build(newest, since)
            return
        if foreign:
            added.append(id_hashes(self.target.done_ids(self.node, since, foreign)))
            self.foreign_reads += 1
        self._insert(np.concatenate(added) if added else np.empty(0, np.int64))
        self._version = newest

    def _marker(self, tag: Any) -> tuple[str, int] | None:
        """``(epoch, batchId)`` of an inbox marker of this node (None: not one)."""
        parsed = parse_tag(tag)
        prefix = f"{INBOX_APP_PREFIX}{self.node}."
        if parsed is None or not parsed[0].startswith(prefix) or parsed[2] is not None:
            return None
        return parsed[0][len(prefix):], parsed[1]

    def _build(self, version: int, since: dt.date) -> None:
        """Every done id of the node in the window, from a scan of the table at ``version`` or later."""
        self._hashes = np.sort(id_hashes(self.target.done_ids(self.node, since)))
        self._version, self._since = version, since
        self._recorded.clear()  # older than the scan: in it
        self.builds += 1

    def _insert(self, hashes: np.ndarray) -> None:
        if len(hashes):
            self._hashes = np.sort(np.concatenate([self._hashes, hashes]))


def marker_in(history: Sequence[Entry], app_id: str, batch_id: int) -> bool | None:
    """Whether the inbox ``history`` holds the marker ``(app_id, batch_id)`` (or a later batch's of its epoch), from
    the commits' tags: True; False when it holds none and is whole (version 0 is in it, or there is no table); None
    when log cleanup cut it, so the answer is in the table's rows."""
    if applied_in_history((entry[2] for entry in history), app_id, batch_id):
        return True
    return False if not history or min(entry[0] for entry in history) == 0 else None


def _other_node(tag: Any) -> bool:
    """Whether ``tag`` is an inbox marker (of any node: this node's are told apart before)."""
    parsed = parse_tag(tag)
    return parsed is not None and parsed[0].startswith(INBOX_APP_PREFIX) and parsed[2] is None
