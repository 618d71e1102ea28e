"""A saga step's batch reports, stored once per batch, the one record ``status``, ``drain``, metrics and the
balancer read, in any process (over Spark Connect the batches run in a server process; they write here too);
and its query's restarts (:class:`RestartLog`), kept beside them for the views.

One small JSON file per query (a step, or one shard of it), ``<root>/status/<unit label>.json``, rewritten
whole (write, then rename) after each batch that carried messages: the totals (:data:`COUNTERS`), the last
batch id counted per epoch (a replay is not counted again), the newest :data:`KEEP`
:class:`~safebunny.exactly_once.protocol.report.BatchReport`\\ s and the driver of the last one
(docs/operations.md, "Status from any process"). A file of an older safebunny (totals without reports) is
read for its totals.

:func:`add_report` and :func:`summary` are pure: they work on the record as a dict.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

import orjson

from safebunny.exactly_once.protocol.report import BatchReport
from safebunny.storage.location import resolve_under
from safebunny.storage.records import read_record
from safebunny.storage.writes import write_atomically

__all__ = ["COUNTERS", "KEEP", "ReportStore", "RestartLog", "StepCounters", "add_report", "summary"]

#: the counters every step keeps since its root was created, and what each counts: ``StepStatus``'s counters,
#: the metrics ``safebunny_step_<name>_total`` and ``safebunny status``'s columns. ``batches`` counts the
#: batches with messages; each other is the sum of the batch reports' field of that name.
COUNTERS: dict[str, str] = {
    "batches": "Batches with messages the step processed (all processes).",
    "received": "Messages the step received, duplicates included.",
    "processed": "Messages the step processed (effects applied, emits sent).",
    "duplicates": "Messages the step dropped as already processed.",
    "failed": "Messages whose handler failed (then retried or parked).",
    "retried": "Failed messages sent to a retry tier.",
    "parked": "Failed messages sent to the poison queue.",
}
#: the rate is the messages received per second over this many seconds before now
RATE_WINDOW_S = 60.0
#: batch reports kept per query: a minute of batches at 4 a second, for the rate
KEEP = 240
_EPOCHS = 64  # epochs remembered (one per checkpoint the step ever had)
_FIELDS = frozenset(f.name for f in fields(BatchReport))


@dataclass(frozen=True)
class StepCounters:
    """One step's totals (``totals``: each of :data:`COUNTERS`); ``rate``: messages received per second over the
    last minute; its last batch with messages: when it finished, its id, the saga driver that ran it
    (``SagaSettings(driver=...)``; None for a single driver), the messages it received and its seconds."""

    step: str
    totals: Mapping[str, int]
    rate: float | None
    last_batch: str | None
    last_batch_id: int | None
    last_driver: str | None = None
    last_received: int | None = None
    last_seconds: float | None = None


def add_report(record: Mapping[str, Any] | None, report: BatchReport,
               driver: str | None = None) -> dict[str, Any] | None:
    """The record with ``report`` added, or None when its batch ``(epoch, batch_id)`` is counted already;
    ``driver``: the saga driver that ran it (among several, the holder of a shard)."""
    record = record or {}
    epochs = dict(record.get("epochs") or {})
    last = epochs.get(report.epoch)
    if last is not None and report.batch_id <= last:
        return None
    epochs.pop(report.epoch, None)
    epochs[report.epoch] = report.batch_id  # the newest epoch last, so the oldest are dropped first
    totals = {name: int(record.get(name, 0)) + (1 if name == "batches" else int(getattr(report, name)))
              for name in COUNTERS}
    stored = {**asdict(report), "finished_at": report.finished_at.astimezone(dt.timezone.utc).isoformat(),
              "seconds": round(report.seconds, 4), "phases": {k: round(v, 4) for k, v in report.phases.items()}}
    return {**totals, "epochs": dict(list(epochs.items())[-_EPOCHS:]), "last_driver": driver,
            "reports": [*(record.get("reports") or []), stored][-KEEP:]}


def summary(step: str, record: Mapping[str, Any] | None, now: dt.datetime | None = None) -> StepCounters:
    """A step's counters from its record (zeros and no rate when it has none)."""
    record = record or {}
    now = now or dt.datetime.now(dt.timezone.utc)
    reports = record.get("reports") or []
    rate = None
    if reports:
        since = now - dt.timedelta(seconds=RATE_WINDOW_S)
        recent = (r["received"] for r in reports if dt.datetime.fromisoformat(r["finished_at"]) > since)
        rate = sum(recent) / RATE_WINDOW_S
    last = reports[-1] if reports else {}
    return StepCounters(step, {name: int(record.get(name, 0)) for name in COUNTERS}, rate, last.get("finished_at"),
                        last.get("batch_id"), record.get("last_driver"), last.get("received"), last.get("seconds"))


def _report(stored: Mapping[str, Any]) -> BatchReport:
    values = {k: v for k, v in stored.items() if k in _FIELDS}
    values["finished_at"] = dt.datetime.fromisoformat(values["finished_at"])
    return BatchReport(**values)


class ReportStore:
    """The stored batch reports of query ``label`` (a step, or a shard) of the saga under ``root`` (a local path or
    a URI pyarrow opens)."""

    def __init__(self, root: str, label: str) -> None:
        self.filesystem, self.path = resolve_under(root, "root", "status", f"{label}.json")
        self.label = label

    def read(self) -> dict[str, Any] | None:
        """The record, or None before the query's first batch with messages."""
        data = read_record(self.filesystem, self.path)
        return orjson.loads(data) if data else None

    def record(self, report: BatchReport, driver: str | None = None) -> bool:
        """Count ``report``'s batch once; False when it was counted before (a replay)."""
        updated = add_report(self.read(), report, driver)
        if updated is None:
            return False
        # readers see the old record or the new one, never a part; counters need no fsync
        write_atomically(self.filesystem, self.path, orjson.dumps(updated), durable=False)
        return True

    def counters(self, now: dt.datetime | None = None) -> StepCounters:
        return summary(self.label, self.read(), now)

    def reports(self) -> list[BatchReport]:
        """The newest :data:`KEEP` reports, oldest first."""
        return [_report(r) for r in (self.read() or {}).get("reports") or []]


class RestartLog:
    """How often query ``label`` (a step, or a shard) of the saga under ``root`` was started again after it stopped,
    ``<root>/status/<label>.restarts.json``, so any process (``saga.view()``, ``safebunny view``) can show it.

    Written by whoever restarts a query (``saga.run``'s supervisor, ``saga.drain``) with the count, when and the
    error's first line. A display record, not exactly-once state: two drivers restarting one shard at the same
    instant may count one restart (the last write wins)."""

    def __init__(self, root: str, label: str) -> None:
        self.filesystem, self.path = resolve_under(root, "root", "status", f"{label}.restarts.json")

    def read(self) -> dict[str, Any]:
        """``{"count": n, "last": ISO time or None, "error": first line or None}``."""
        data = read_record(self.filesystem, self.path)
        record = orjson.loads(data) if data else {}
        return {"count": int(record.get("count", 0)), "last": record.get("last"), "error": record.get("error")}

    def record(self, error: str | None = None) -> int:
        """Count one restart (``error``: why the query stopped); the new count."""
        count = self.read()["count"] + 1
        line = (error or "").strip().splitlines()[0][:300] if error and error.strip() else None
        write_atomically(self.filesystem, self.path, orjson.dumps({
            "count": count, "last": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "error": line}),
            durable=False)
        return count

    def count(self) -> int:
        return int(self.read()["count"])
