"""A Delta table's history (``DESCRIBE HISTORY``) kept on the driver and read again from its newest known commit on.

Reading a table's whole history costs one read of every commit file it keeps, so a step that reads it before
every batch pays more with each batch (and a by-name batch read it twice: the fence's lock, then whether its
commit landed). A table's history only grows at its top, so after one whole read, each read asks for the newest
few commits (``LIMIT``, widened until it reaches a commit already known) and adds them: the same answer as a whole
read, kept complete. A known commit read back with another timestamp or tag, or a newest version lower than the
one known, means the table was replaced under its name: the cache starts over with a whole read.

One cache per table reference per process (:func:`history_cache`), shared by every step and thread that reads it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

__all__ = ["HistoryCache", "history_cache", "Entry"]

#: ``(version, timestamp, userMetadata, operation)`` of one commit
Entry = tuple[int, Any, Any, str]
#: the first ``LIMIT`` of an incremental read; widened eightfold until it meets a known commit
_FIRST_LIMIT = 8


class HistoryCache:
    """The history of the table ``ref`` (a quoted name or ``delta.`path```), as of its last :meth:`read`."""

    def __init__(self, ref: str) -> None:
        self.ref = ref
        self._entries: dict[int, Entry] = {}
        self._newest = -1
        self._lock = threading.Lock()
        #: reads that were whole (the first, and each start-over), for tests and reports
        self.whole_reads = 0

    def read(self, spark: Any) -> list[Entry]:
        """Every commit of the table now (newest first), reading only what is new since the last read."""
        with self._lock:
            self._catch_up(lambda limit: _describe(spark, self.ref, limit))
            return [self._entries[v] for v in sorted(self._entries, reverse=True)]

    def forget(self) -> None:
        """The table is gone: the next read is whole."""
        with self._lock:
            self._entries, self._newest = {}, -1

    def _catch_up(self, describe: Callable[[int | None], list[Entry]]) -> None:
        limit: int | None = None if self._newest < 0 else _FIRST_LIMIT
        while True:
            rows = describe(limit)
            if limit is None:  # a whole read
                self.whole_reads += 1
                self._entries = {row[0]: row for row in rows}
                self._newest = max(self._entries, default=-1)
                return
            top = max((row[0] for row in rows), default=-1)
            known = [row for row in rows if row[0] <= self._newest]
            if top < self._newest or any(self._entries.get(row[0], row)[1:3] != row[1:3] for row in known):
                self._entries, self._newest, limit = {}, -1, None  # replaced under its name: start over
                continue
            if known:  # reaches the newest known commit, which reads as before: the same table, nothing missed
                self._entries.update((row[0], row) for row in rows)
                self._newest = max(top, self._newest)
                return
            if len(rows) < limit:  # all there is, and a gap after the known commits: log cleanup cut it
                self._entries, self._newest, limit = {}, -1, None  # read whole, as a new process would
                continue
            limit *= 8


def _describe(spark: Any, ref: str, limit: int | None) -> list[Entry]:
    sql = f"DESCRIBE HISTORY {ref}" + ("" if limit is None else f" LIMIT {limit}")
    return [(row[0], row[1], row[2], row[3]) for row in
            spark.sql(sql).select("version", "timestamp", "userMetadata", "operation").collect()]


_CACHES: dict[str, HistoryCache] = {}
_CACHES_LOCK = threading.Lock()


def history_cache(ref: str) -> HistoryCache:
    """The process's one cache of the table ``ref``'s history."""
    with _CACHES_LOCK:
        cache = _CACHES.get(ref)
        if cache is None:
            cache = _CACHES[ref] = HistoryCache(ref)
        return cache
