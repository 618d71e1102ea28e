"""Inbox maintenance: drop old partitions, compact, vacuum, sweep staging files of killed writers.

Run serially from one job: vacuum with a zero retention breaks readers of older snapshots and
``full=True`` can delete a concurrent writer's uncommitted file, so the default retention is kept.
"""

from __future__ import annotations

import datetime as dt
import glob
import logging
import os
import time

from safebunny.exactly_once.delta_rs import DeltaPath

__all__ = ["maintain", "retention_predicate", "sweep_staging_files"]

log = logging.getLogger("safebunny.inbox")
#: A staging file younger than this may belong to a writer still running; leave it.
STAGING_GRACE_SECONDS = 3600


def maintain(delta: DeltaPath, keep_from: dt.datetime, vacuum: bool = True, node: str | None = None
             ) -> dict[str, object]:
    """Delete ``node``'s partitions (every node's when None) before ``keep_from``, compact, vacuum; return
    what was done. Each node keeps its own window: a shared inbox is maintained node by node."""
    table = delta.table()
    if table is None:
        return {"deleted": 0, "compacted": 0, "vacuumed": 0, "swept": 0}
    deleted = table.delete(retention_predicate(keep_from, node))
    table.update_incremental()
    compacted = table.optimize.compact()
    vacuumed = table.vacuum(dry_run=False) if vacuum else []
    swept = sweep_staging_files(delta.path)
    result = {"deleted": int(deleted.get("num_deleted_rows", 0) or 0),
              "compacted": int(compacted.get("numFilesRemoved", 0) or 0),
              "vacuumed": len(vacuumed), "swept": swept}
    log.info("inbox %s maintained: %s", delta.path, result)
    return result


def retention_predicate(keep_from: dt.datetime, node: str | None = None) -> str:
    """The delete predicate of a node's rows older than ``keep_from`` (a SQL string literal, quotes doubled)."""
    older = f"processedDate < '{keep_from.date().isoformat()}'"
    return older if node is None else f"node = '{node.replace(chr(39), chr(39) * 2)}' AND {older}"


def sweep_staging_files(path: str, now: float | None = None) -> int:
    """Remove ``part-*.parquet#*`` files that a SIGKILLed delta-rs writer left (local paths only)."""
    if "://" in path and not path.startswith("file://"):
        return 0
    root = path.removeprefix("file://")
    limit = (now or time.time()) - STAGING_GRACE_SECONDS
    removed = 0
    for name in glob.glob(os.path.join(root, "**", "*.parquet#*"), recursive=True):
        if os.path.getmtime(name) < limit:
            os.remove(name)
            removed += 1
    return removed
