"""Batch reports of a saga's steps on storage, for ``status()`` and ``drain()`` over Spark Connect.

On a classic session a step's ``foreachBatch`` function runs in the process that started the query, so
``Saga.status()`` and ``drain()`` read the steps' :class:`~safebunny.exactly_once.step.BatchReport`\\ s
and failure counters in memory. Over Spark Connect the function (and its copy of the step) runs in a
Python process on the server, so each batch's report and the failures it routed are written to
``<root>/reports/<step>/<epoch>-<batch>.json``, one file per batch: a replayed batch overwrites its own
file instead of counting twice. The newest :data:`KEEP` files per step are kept, as a step keeps its
newest reports in memory.
"""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict

import pyarrow.fs as pafs

from safebunny.exactly_once.step import BatchReport
from safebunny.storage.location import resolve_under
from safebunny.storage.records import list_records, read_records, remove_record
from safebunny.storage.writes import write_atomically

__all__ = ["ReportLog", "KEEP"]

KEEP = 200
_PRUNE_EVERY = 50


class ReportLog:
    """The stored batch reports of one saga step."""

    def __init__(self, root: str, label: str) -> None:
        self.fs, self.folder = resolve_under(root, "root", "reports", label)
        self._written = 0

    def write(self, report: BatchReport, counts: Mapping[str, int]) -> None:
        """Store ``report`` and the failures its batch routed (``counts``: retried, poisoned)."""
        record = asdict(report)
        record["finished_at"] = report.finished_at.isoformat()
        record["phases"] = dict(report.phases)
        record["counts"] = dict(counts)
        name = f"{self.folder}/{report.epoch}-{report.batch_id:012d}.json"
        write_atomically(self.fs, name, json.dumps(record).encode(), durable=False)
        self._written += 1
        if self._written % _PRUNE_EVERY == 0:
            for info in self._files()[:-KEEP]:
                remove_record(self.fs, info.path)

    def read(self) -> tuple[list[BatchReport], Counter[str]]:
        """The stored reports (oldest first) and the failure counts of their batches."""
        reports: list[BatchReport] = []
        counts: Counter[str] = Counter()
        for record in read_records(self.fs, self._files()[-KEEP:], json.loads, skip=(ValueError,)):
            # a file pruned or being replaced meanwhile is left out
            counts.update(record.pop("counts", {}))
            record["finished_at"] = dt.datetime.fromisoformat(record["finished_at"])
            reports.append(BatchReport(**record))
        reports.sort(key=lambda r: r.finished_at)
        return reports, counts

    def _files(self) -> list[pafs.FileInfo]:
        return sorted(list_records(self.fs, self.folder, ".json"), key=lambda i: (i.mtime_ns or 0, i.base_name))
