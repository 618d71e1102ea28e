"""Delta tables through delta-rs (``deltalake``), with an app transaction per batch.

delta-rs records app transactions but does not skip a replay (writing ``(app_id, version)`` twice
commits twice), so every write here reads the table's transaction version first and writes only
when it is below the batch's version. Reads pass a pyarrow filesystem for local paths: reading on
the default filesystem makes the process abort at exit (delta-rs#2184).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.dataset as pads
from pyarrow import fs as pafs

from safebunny.exactly_once.merge_rows import last_per_key
from safebunny.storage.location import absolute_location, resolve_location
from safebunny.storage.volumes import refuse_volume

__all__ = ["DeltaPath", "Guard", "is_path"]

log = logging.getLogger("safebunny.inbox")
T = TypeVar("T")
#: ``guard(read)``: checks a snapshot before a commit (``read(app_id)`` is its version there); raises to refuse
Guard = Callable[[Callable[[str], "int | None"]], None]
_CONFLICT_RETRIES = 8


def is_path(table: str) -> bool:
    """A table given by path (``/...``, ``./...``, ``file:``, ``s3://``, ...) rather than by name."""
    return "/" in table or "\\" in table or table.startswith(".") or "://" in table


class DeltaPath:
    """One Delta table at a path: transaction-checked appends and merges, filtered reads."""

    def __init__(self, path: str, what: str = "The Delta table", option: str = "table") -> None:
        refuse_volume(path, what, option)  # every delta-rs table (inbox, effect tables) goes through here
        self.path = absolute_location(path)

    # -- reading -------------------------------------------------------------------------------
    def table(self) -> Any | None:
        """The current ``DeltaTable``, or ``None`` when no table exists at the path yet.

        Loading a table reads its log from the last checkpoint (more as commits pile up), and
        a batch asks for its inbox and effect tables several times; so a local table's handle is kept
        per thread and brought to the latest version with ``update_incremental`` (reads only the
        commits since, far cheaper; docs/performance.md). A handle is dropped when the commit file of its
        version is gone or was rewritten (the table was deleted and created again at the same path)."""
        from deltalake import DeltaTable
        from deltalake.exceptions import TableNotFoundError

        cached = _handles().get(self.path)
        if cached is not None:
            handle, stamp = cached
            if _commit_stamp(self.path, handle.version()) == stamp:
                try:
                    handle.update_incremental()
                    return handle
                except Exception:  # noqa: BLE001 - a handle that cannot catch up is loaded again
                    pass
            _handles().pop(self.path, None)
        try:
            handle = DeltaTable(self.path)
        except TableNotFoundError:
            return None
        stamp = _commit_stamp(self.path, handle.version())
        if stamp is not None:
            _handles()[self.path] = (handle, stamp)
        return handle

    def filesystem(self) -> pafs.FileSystem:
        """A pyarrow filesystem rooted at the table (paths in the Delta log are relative to it)."""
        filesystem, root = resolve_location(self.path, "table")
        return pafs.SubTreeFileSystem(root, filesystem)

    def dataset(self, table: Any) -> pads.Dataset:
        local = "://" not in self.path or self.path.startswith("file://")
        return table.to_pyarrow_dataset(filesystem=self.filesystem() if local else None)

    def read(self, filter_: Any = None, columns: Sequence[str] | None = None) -> pa.Table | None:
        table = self.table()
        if table is None:
            return None
        return self.dataset(table).to_table(filter=filter_, columns=list(columns) if columns else None)

    def arrow_schema(self) -> pa.Schema | None:
        """The table's schema as Arrow, or ``None`` when no table exists at the path yet."""
        table = self.table()
        return None if table is None else pa.schema(table.schema().to_arrow())

    def version_of(self, app_id: str) -> int | None:
        table = self.table()
        return None if table is None else table.transaction_version(app_id)

    # -- writing (each a single commit carrying the app transaction) ---------------------------
    def append(self, data: pa.Table, app_id: str, version: int, partition_by: Sequence[str] | None = None,
               fences: Sequence[tuple[str, int]] = (), guard: Guard | None = None) -> bool:
        """Append ``data`` unless ``(app_id, version)`` is already committed; True when written.

        ``fences``: more ``(app id, version)`` transactions for the same commit; ``guard(read)`` runs on the
        snapshot the commit is made from (``read(app_id)`` gives its version there) and raises to refuse."""
        from deltalake import CommitProperties, Transaction, write_deltalake

        def write() -> bool:
            table = self.table()
            if _done(None if table is None else table.transaction_version(app_id), version):
                return False
            if guard is not None:
                guard(lambda app: None if table is None else table.transaction_version(app))
            transactions = [Transaction(app_id, version), *(Transaction(a, v) for a, v in fences)]
            write_deltalake(self.path if table is None else table, data, mode="append",
                            partition_by=list(partition_by) if partition_by else None,
                            commit_properties=CommitProperties(app_transactions=transactions))
            return True

        return _retry_conflicts(write, self.path)

    def merge(self, data: pa.Table, on: Sequence[str], app_id: str, version: int,
              fences: Sequence[tuple[str, int]] = (), guard: Guard | None = None) -> bool:
        """Upsert ``data`` on the ``on`` columns unless ``(app_id, version)`` is committed. Where rows of
        ``data`` share a key, the last one wins (the step orders them by source first). ``fences`` and
        ``guard`` as for :meth:`append`."""
        from deltalake import CommitProperties, Transaction

        data = last_per_key(data, on)

        def write() -> bool:
            table = self.table()
            if table is None:
                return self.append(data, app_id, version, fences=fences, guard=guard)
            if _done(table.transaction_version(app_id), version):
                return False
            if guard is not None:
                guard(table.transaction_version)
            transactions = [Transaction(app_id, version), *(Transaction(a, v) for a, v in fences)]
            predicate = " AND ".join(f"t.`{k}` = s.`{k}`" for k in on)
            (table.merge(data, predicate, source_alias="s", target_alias="t",
                         commit_properties=CommitProperties(app_transactions=transactions))
             .when_matched_update_all().when_not_matched_insert_all().execute())
            return True

        return _retry_conflicts(write, self.path)


_local = threading.local()


def _handles() -> dict[str, tuple[Any, tuple[int, int]]]:
    """This thread's table handles by path (a handle is never shared between threads)."""
    if not hasattr(_local, "handles"):
        _local.handles = {}
    return _local.handles


def _commit_stamp(path: str, version: int) -> tuple[int, int] | None:
    """(mtime ns, size) of a local table's commit file for ``version``; None when not local or missing
    (such a handle is not kept)."""
    if "://" in path and not path.startswith("file://"):
        return None
    log_file = os.path.join(path.removeprefix("file://"), "_delta_log", f"{version:020d}.json")
    try:
        info = os.stat(log_file)
    except OSError:
        return None
    return info.st_mtime_ns, info.st_size


def _done(committed: int | None, version: int) -> bool:
    return committed is not None and committed >= version


def _retry_conflicts(write: Callable[[], T], path: str) -> T:
    """Rerun ``write`` when another writer committed first (delta-rs does not retry by itself)."""
    from deltalake.exceptions import CommitFailedError

    for attempt in range(1, _CONFLICT_RETRIES + 1):
        try:
            return write()
        except CommitFailedError as exc:
            if attempt == _CONFLICT_RETRIES:
                raise
            log.info("concurrent commit on %s (%s); retrying (%d/%d)", path, exc, attempt, _CONFLICT_RETRIES)
            time.sleep(0.05 * attempt)
    raise AssertionError("unreachable")
