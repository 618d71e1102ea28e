"""A Delta table by path through delta-rs (``deltalake``), with an app transaction per batch.

delta-rs records app transactions but does not skip a replay (writing ``(app_id, version)`` twice
commits twice), so every write here reads the table's transaction version first and writes only
when it is below the batch's version. Reads pass a pyarrow filesystem for local paths: reading on
the default filesystem makes the process abort at exit (delta-rs#2184).

Maintenance (docs/exactly-once.md) keeps vacuum's default retention (zero breaks readers of older snapshots,
``full=True`` can delete a concurrent writer's file) and sweeps the staging files a SIGKILLed writer left.
"""

from __future__ import annotations

import datetime as dt
import glob
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
from pyarrow import fs as pafs

from safebunny.delta.merge_rows import last_per_key
from safebunny.delta.seen_index import SeenIndex
from safebunny.delta.target import DeltaTarget, Guard, Prefix
from safebunny.storage.location import absolute_location, local_path, resolve_location
from safebunny.storage.volumes import refuse_volume

__all__ = ["DeltaRsTarget", "sweep_staging_files"]

log = logging.getLogger("safebunny.inbox")
T = TypeVar("T")
_CONFLICT_RETRIES = 8
#: A staging file younger than this may belong to a writer still running; leave it.
STAGING_GRACE_SECONDS = 3600


class DeltaRsTarget(DeltaTarget):
    """One Delta table at a path: transaction-checked appends and merges (fenceable), filtered reads."""

    backend = "delta-rs"
    fenceable = True

    def __init__(self, path: str, what: str = "The Delta table", option: str = "table") -> None:
        refuse_volume(path, what, option)  # every delta-rs table (inbox, effect tables) goes through here
        self.table = self.path = absolute_location(path)
        #: the table's folder on this machine, or None on another filesystem (an object store): decided once
        self.local = local_path(self.path)
        self._indexes: dict[str, SeenIndex] = {}  # an inbox's seen ids per node

    # -- reading -------------------------------------------------------------------------------
    def handle(self) -> Any | None:
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
            handle, version, stamp = cached  # a write through the handle moves its version: compare the one stamped
            if self._commit_stamp(version) == stamp:
                try:
                    handle.update_incremental()
                except Exception:  # noqa: BLE001 - a handle that cannot catch up is loaded again
                    pass
                else:
                    if self._keep(handle):
                        return handle
            _handles().pop(self.path, None)
        try:
            handle = DeltaTable(self.path)
        except TableNotFoundError:
            return None
        self._keep(handle)
        return handle

    def _keep(self, handle: Any) -> bool:
        """Keep ``handle`` for this thread with the stamp of its version's commit file (not kept when there is none)."""
        version = handle.version()
        stamp = self._commit_stamp(version)
        if stamp is not None:
            _handles()[self.path] = (handle, version, stamp)
        return stamp is not None

    def filesystem(self) -> pafs.FileSystem:
        """A pyarrow filesystem rooted at the table (paths in the Delta log are relative to it)."""
        filesystem, root = resolve_location(self.path, "table")
        return pafs.SubTreeFileSystem(root, filesystem)

    def _commit_stamp(self, version: int) -> tuple[int, int] | None:
        """(mtime ns, size) of a local table's commit file for ``version``; None when not local or missing
        (such a handle is not kept)."""
        if self.local is None:
            return None
        try:
            info = os.stat(os.path.join(self.local, "_delta_log", f"{version:020d}.json"))
        except OSError:
            return None
        return info.st_mtime_ns, info.st_size

    def read(self, equal: Mapping[str, Any] | None = None, columns: Sequence[str] | None = None) -> pa.Table | None:
        flt = None
        for column, value in (equal or {}).items():
            term = (pc.field(column).isin(list(value)) if isinstance(value, (list, tuple))
                    else pc.field(column) == value)
            flt = term if flt is None else flt & term
        return self.scan(flt, columns)

    def scan(self, filter_: Any = None, columns: Sequence[str] | None = None) -> pa.Table | None:
        """The rows matching the pyarrow expression ``filter_`` (all when None); None when there is no table. The
        reads a delta-rs table alone answers (an inbox's scan and index), in pyarrow's terms."""
        table = self.handle()
        if table is None:
            return None
        dataset: pads.Dataset = table.to_pyarrow_dataset(filesystem=None if self.local is None else self.filesystem())
        return dataset.to_table(filter=filter_, columns=list(columns) if columns else None)

    def schema(self) -> pa.Schema | None:
        table = self.handle()
        return None if table is None else pa.schema(table.schema().to_arrow())

    def versions(self, apps: Mapping[str, int], since: Mapping[str, float] | None = None) -> dict[str, int | None]:
        # app transactions live in the snapshot (and its checkpoints), which log cleanup keeps: no ``since`` needed
        table = self.handle()
        return {app: None if table is None else table.transaction_version(app) for app in apps}

    def table_version(self) -> int | None:
        table = self.handle()
        return None if table is None else table.version()

    # -- writing (each a single commit carrying the app transaction) ---------------------------
    def append(self, data: pa.Table, app_id: str | None = None, version: int = 0, partition_by: Sequence[str] = (),
               fences: Sequence[tuple[str, int]] = (), guard: Guard | None = None) -> bool:
        from deltalake import CommitProperties, Transaction, write_deltalake
        from deltalake.exceptions import CommitFailedError

        def write() -> bool:
            table = self.handle()
            if table is None:  # created empty first: the commit below then has a snapshot, so a concurrent one
                self._create(data.schema, partition_by)  # sharing an app id conflicts (a create's never does)
                table = self.handle()
                if table is None:
                    raise CommitFailedError(f"the Delta table {self.path} was created and is not there to read")
            if app_id is not None and _done(table.transaction_version(app_id), version):
                return False
            if guard is not None:
                guard(table.transaction_version, table.version())
            own = [(app_id, version)] if app_id is not None else []
            transactions = [Transaction(a, v) for a, v in (*own, *fences)]
            write_deltalake(table, data, mode="append",
                            commit_properties=CommitProperties(app_transactions=transactions) if transactions
                            else None)
            return True

        return _retry_conflicts(write, self.path)

    def _create(self, schema: pa.Schema, partition_by: Sequence[str]) -> None:
        """Create the table with ``schema`` and no rows (one commit of its metadata alone), unless a table is
        there by then. delta-rs lets a create that lost the race to another writer's create commit at the next
        version without checking the app transactions the two carry (seen: both of two fenced decisions landed,
        1 run in 3), so no commit that carries one is ever a create."""
        from deltalake import write_deltalake
        from deltalake.exceptions import DeltaError

        try:
            write_deltalake(self.path, schema.empty_table(), mode="ignore",
                            partition_by=list(partition_by) if partition_by else None)
        except DeltaError as exc:  # another writer's create landed first: the caller reads that table
            log.info("the Delta table %s was created by another writer meanwhile (%s)", self.path, exc)

    def merge(self, data: pa.Table, on: Sequence[str], app_id: str, version: int,
              fences: Sequence[tuple[str, int]] = (), guard: Guard | None = None) -> bool:
        """As :meth:`DeltaTarget.merge`; where rows of ``data`` share a key, the last one wins (the step orders
        them by source first)."""
        from deltalake import CommitProperties, Transaction

        data = last_per_key(data, on)

        def write() -> bool:
            table = self.handle()
            if table is None:
                return self.append(data, app_id, version, fences=fences, guard=guard)
            if _done(table.transaction_version(app_id), version):
                return False
            if guard is not None:
                guard(table.transaction_version, table.version())
            transactions = [Transaction(app_id, version), *(Transaction(a, v) for a, v in fences)]
            predicate = " AND ".join(f"t.`{k}` = s.`{k}`" for k in on)
            (table.merge(data, predicate, source_alias="s", target_alias="t",
                         commit_properties=CommitProperties(app_transactions=transactions))
             .when_matched_update_all().when_not_matched_insert_all().execute())
            return True

        return _retry_conflicts(write, self.path)

    # -- maintenance ---------------------------------------------------------------------------
    def delete_before(self, node: str, column: str, before: str, starting: Prefix | None = None) -> int | None:
        table = self.handle()
        if table is None:
            return 0
        predicate = f"node = '{node.replace(chr(39), chr(39) * 2)}' AND {column} < '{before}'"
        if starting is not None:
            text, prefix, starts = starting
            if "%" in prefix or "_" in prefix:  # LIKE's wildcards: the prefixes the step uses have none
                raise ValueError(f"a delete's prefix must not hold % or _: {prefix!r}")
            predicate += f" AND {text} {'LIKE' if starts else 'NOT LIKE'} '{prefix.replace(chr(39), chr(39) * 2)}%'"
        done = table.delete(predicate)
        return int(done.get("num_deleted_rows", 0) or 0)

    def compact(self, vacuum: bool = True) -> dict[str, Any]:
        table = self.handle()
        if table is None:
            return {"compacted": 0, "vacuumed": 0, "swept": 0}
        compacted = table.optimize.compact()
        vacuumed = table.vacuum(dry_run=False) if vacuum else []
        return {"compacted": int(compacted.get("numFilesRemoved", 0) or 0), "vacuumed": len(vacuumed),
                "swept": sweep_staging_files(self.path)}

    # -- an inbox's look-ups: pyarrow filters on the node's partitions inside the window, answered by the node's
    # SeenIndex (O(batch)) when it can, else by a scan; "batch done" is the inbox app transaction's version
    def batch_done(self, app_id: str, node: str, epoch: str, batch_id: int) -> bool:
        committed = self.versions({app_id: batch_id})[app_id]
        return committed is not None and committed >= batch_id

    def seen(self, node: str, since: dt.date, message_ids: Sequence[str], epoch: str, batch_id: int) -> set[str]:
        index = self._indexes.get(node)
        if index is None:
            index = self._indexes[node] = SeenIndex(self, node)
        found = index.lookup(message_ids, since, epoch, batch_id)
        return found if found is not None else self.seen_by_scan(node, since, message_ids, epoch, batch_id)

    def recorded(self, node: str, epoch: str, batch_id: int, done_ids: Sequence[str]) -> None:
        """Nothing to note: the node's :class:`SeenIndex` reads the marker's new files at its next look-up."""

    def seen_by_scan(self, node: str, since: dt.date, message_ids: Sequence[str], epoch: str,
                     batch_id: int) -> set[str]:
        """:meth:`seen` by reading the node's partitions in the window (what the index saves)."""
        field = pc.field
        flt = ((field("node") == node) & (field("processedDate") >= since.isoformat())
               & (field("status") == "done") & field("messageId").isin(pa.array(list(message_ids), pa.string()))
               & ~((field("epoch") == epoch) & (field("batchId") == batch_id)))
        found = self.scan(flt, ["messageId"])
        return set() if found is None else set(found.column("messageId").to_pylist())


def sweep_staging_files(path: str, now: float | None = None) -> int:
    """Remove ``part-*.parquet#*`` files that a SIGKILLed delta-rs writer left (local paths only)."""
    root = local_path(path)
    if root is None:
        return 0
    limit = (now or time.time()) - STAGING_GRACE_SECONDS
    removed = 0
    for name in glob.glob(os.path.join(root, "**", "*.parquet#*"), recursive=True):
        if os.path.getmtime(name) < limit:
            os.remove(name)
            removed += 1
    return removed


_local = threading.local()


def _handles() -> dict[str, tuple[Any, int, tuple[int, int]]]:
    """This thread's table handles by path (a handle is never shared between threads)."""
    if not hasattr(_local, "handles"):
        _local.handles = {}
    return _local.handles


def _done(committed: int | None, version: int) -> bool:
    return committed is not None and committed >= version


def _retry_conflicts(write: Callable[[], T], path: str) -> T:
    """Rerun ``write`` when another writer committed first (delta-rs does not retry by itself)."""
    from deltalake.exceptions import CommitFailedError

    for attempt in range(1, _CONFLICT_RETRIES):
        try:
            return write()
        except CommitFailedError as exc:
            log.info("concurrent commit on %s (%s); retrying (%d/%d)", path, exc, attempt, _CONFLICT_RETRIES)
            time.sleep(0.05 * attempt)
    return write()  # the last attempt: its conflict is raised
