"""Each saga step's counters, recorded durably once per batch, so ``status`` reads the same in any process.

One small JSON file per step, ``<root>/status/<node>.<type>.json``, rewritten whole (write, then rename)
after each batch that carried messages. It holds the totals since the saga root was created, the last
batch id counted in each epoch (a batch whose id is not above it, a replay after a crash, is not counted
again), and the most recent batches (for the rate). A plain file, not a Delta table: it costs a small fraction of a
Delta append with its transaction check (docs/performance.md).

A crash of the driver loses nothing: the file is renamed into place in one step, and a batch replayed
after a crash is counted once (by its epoch and batch id). A power loss between the write and the next
flush of the page cache may lose the last batches' counts (never messages).

The rest of the module is pure: :func:`add_batch` and :func:`summary` work on the record as a dict.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import orjson

from safebunny.storage.location import resolve_under
from safebunny.storage.records import read_record
from safebunny.storage.writes import write_atomically

__all__ = ["BatchCounts", "StepCounters", "StatusLog", "LastBatch", "add_batch", "summary", "last_batch", "COUNTERS",
           "RATE_WINDOW_S"]

#: the totals kept per step (the counter vocabulary of ``StepStatus``)
COUNTERS = ("batches", "received", "processed", "duplicates", "failed", "retried", "parked", "emitted")
#: the rate is the messages received per second over this many seconds before now
RATE_WINDOW_S = 60.0
_RECENT = 240  # batches kept for the rate: a minute of batches at 4 a second
_EPOCHS = 64  # epochs remembered (one per checkpoint the step ever had)


@dataclass(frozen=True)
class BatchCounts:
    """What one batch of a step did, as the status log counts it."""

    received: int
    processed: int
    duplicates: int
    failed: int
    retried: int
    parked: int
    emitted: int
    seconds: float
    finished_at: dt.datetime


@dataclass(frozen=True)
class StepCounters:
    """One step's totals from its status log; ``rate``: messages received per second over the last minute."""

    step: str
    batches: int
    received: int
    processed: int
    duplicates: int
    failed: int
    retried: int
    parked: int
    emitted: int
    rate: float | None
    last_batch: str | None
    last_batch_id: int | None
    #: the saga driver that ran the last batch (``Saga(driver=...)``; None for a single driver)
    last_driver: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def add_batch(record: Mapping[str, Any] | None, epoch: str, batch_id: int, counts: BatchCounts,
              driver: str | None = None) -> dict[str, Any] | None:
    """The record with batch ``(epoch, batch_id)`` added, or None when it is counted already; ``driver``: the
    saga driver that ran it (among several, the holder of a shard)."""
    out: dict[str, Any] = {"epochs": {}, "recent": [], **{c: 0 for c in COUNTERS}, **dict(record or {})}
    epochs = dict(out["epochs"])
    last = epochs.get(epoch)
    if last is not None and batch_id <= last:
        return None
    epochs.pop(epoch, None)
    epochs[epoch] = batch_id  # the newest epoch last, so the oldest are dropped first
    out["epochs"] = dict(list(epochs.items())[-_EPOCHS:])
    out["batches"] += 1
    for name in COUNTERS[1:]:
        out[name] += int(getattr(counts, name))
    stamp = counts.finished_at.astimezone(dt.timezone.utc).isoformat()
    out["recent"] = [*out["recent"], [stamp, counts.received, round(counts.seconds, 4)]][-_RECENT:]
    out["last_batch"] = stamp
    out["last_batch_id"] = batch_id
    out["last_driver"] = driver
    return out


@dataclass(frozen=True)
class LastBatch:
    """The last counted batch of a step: its id, messages received, seconds it took and when it finished."""

    batch_id: int | None
    received: int
    seconds: float
    finished_at: str


def last_batch(record: Mapping[str, Any] | None) -> LastBatch | None:
    """The record's last counted batch, or None before the first."""
    recent = (record or {}).get("recent") or []
    if not recent:
        return None
    stamp, received, seconds = recent[-1][:3]
    return LastBatch(record.get("last_batch_id") if record else None, int(received), float(seconds), stamp)


def summary(step: str, record: Mapping[str, Any] | None, now: dt.datetime | None = None) -> StepCounters:
    """A step's counters from its record (zeros and no rate when it has none)."""
    record = record or {}
    now = now or dt.datetime.now(dt.timezone.utc)
    recent = record.get("recent") or []
    rate = None
    if recent:
        since = now - dt.timedelta(seconds=RATE_WINDOW_S)
        rate = sum(r[1] for r in recent if dt.datetime.fromisoformat(r[0]) > since) / RATE_WINDOW_S
    return StepCounters(step, *(int(record.get(c, 0)) for c in COUNTERS), rate, record.get("last_batch"),
                        record.get("last_batch_id"), record.get("last_driver"))


class StatusLog:
    """The status file of step ``label`` under the saga root ``root`` (a local path or a URI pyarrow opens)."""

    def __init__(self, root: str, label: str) -> None:
        self.filesystem, self.path = resolve_under(root, "root", "status", f"{label}.json")
        self.label = label

    def read(self) -> dict[str, Any] | None:
        """The record, or None before the step's first batch with messages."""
        data = read_record(self.filesystem, self.path)
        return orjson.loads(data) if data else None

    def counters(self, now: dt.datetime | None = None) -> StepCounters:
        return summary(self.label, self.read(), now)

    def last_batch(self) -> LastBatch | None:
        """The step's last counted batch (:func:`last_batch`)."""
        return last_batch(self.read())

    def record(self, epoch: str, batch_id: int, counts: BatchCounts, driver: str | None = None) -> bool:
        """Count batch ``(epoch, batch_id)`` once; False when it was counted before (a replay)."""
        updated = add_batch(self.read(), epoch, batch_id, counts, driver)
        if updated is None:
            return False
        # readers see the old record or the new one, never a part; counters need no fsync
        write_atomically(self.filesystem, self.path, orjson.dumps(updated), durable=False)
        return True
