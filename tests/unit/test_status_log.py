"""The per-step status log: each (epoch, batch) counted once, the rate over the last minute, the file."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from safebunny.saga.status_log import BatchCounts, StatusLog, add_batch, summary

T0 = dt.datetime(2026, 11, 23, 12, 0, tzinfo=dt.timezone.utc)


def _counts(received: int = 10, at: dt.datetime = T0, **kw: int) -> BatchCounts:
    values = {"processed": received, "duplicates": 0, "failed": 0, "retried": 0, "parked": 0, "emitted": 0, **kw}
    return BatchCounts(received=received, seconds=0.5, finished_at=at, **values)


def test_a_replayed_batch_is_counted_once_and_a_new_epoch_counts_from_zero() -> None:
    record = add_batch(None, "e1", 0, _counts(10, duplicates=2))
    record = add_batch(record, "e1", 1, _counts(5, failed=1, parked=1))
    assert add_batch(record, "e1", 1, _counts(5)) is None      # the replay of batch 1
    assert add_batch(record, "e1", 0, _counts(10)) is None     # an older batch of the same epoch
    record = add_batch(record, "e2", 0, _counts(7))            # a new checkpoint restarts batch ids at 0
    s = summary("a.B", record, now=T0)
    assert (s.batches, s.received, s.processed, s.duplicates, s.failed, s.parked) == (3, 22, 22, 2, 1, 1)
    assert s.last_batch_id == 0 and s.last_batch == T0.isoformat()


def test_the_rate_is_received_per_second_over_the_last_minute() -> None:
    record = None
    for i in range(4):
        record = add_batch(record, "e", i, _counts(30, at=T0 + dt.timedelta(seconds=20 * i)))
    now = T0 + dt.timedelta(seconds=70)  # batches at 20, 40, 60 s are inside the minute; the one at 0 s is not
    assert summary("a.B", record, now=now).rate == 90 / 60
    assert summary("a.B", record, now=now + dt.timedelta(hours=1)).rate == 0.0
    assert summary("a.B", None, now=now).rate is None


def test_the_log_file_survives_a_new_reader_and_ignores_a_replay(tmp_path: Path) -> None:
    log = StatusLog(str(tmp_path), "stock.OrderPlaced")
    assert log.read() is None and log.counters().batches == 0
    assert log.record("e", 0, _counts(4)) is True
    assert log.record("e", 0, _counts(4)) is False
    again = StatusLog(str(tmp_path), "stock.OrderPlaced")  # another process reads the same file
    assert again.counters().received == 4
    assert (tmp_path / "status" / "stock.OrderPlaced.json").exists()
    assert not list((tmp_path / "status").glob("*.tmp-*"))


def test_the_last_batch_is_the_newest_counted_one(tmp_path: Path) -> None:
    from safebunny.saga.status_log import last_batch

    log = StatusLog(str(tmp_path), "stock.OrderPlaced")
    assert log.last_batch() is None and last_batch(None) is None
    now = dt.datetime(2026, 11, 26, 12, tzinfo=dt.timezone.utc)
    for batch_id, received in ((0, 7), (1, 3)):
        log.record("e1", batch_id, BatchCounts(received, received, 0, 0, 0, 0, received, 0.25 * received, now))
    last = log.last_batch()
    assert (last.batch_id, last.received, last.seconds) == (1, 3, 0.75) and last.finished_at.startswith("2026-11-26")
