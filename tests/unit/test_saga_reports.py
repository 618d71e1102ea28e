"""A saga step's stored batch reports: each (epoch, batch) counted once, the rate over the last minute, the last
batch, the file read back by another process, and the counter names spelled once."""

from __future__ import annotations

import dataclasses
import datetime as dt
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import orjson

from safebunny.exactly_once.protocol.report import BatchReport
from safebunny.saga.run.reports import COUNTERS, KEEP, ReportStore, add_report, summary

T0 = dt.datetime(2026, 11, 23, 12, 0, tzinfo=dt.timezone.utc)


def _report(batch_id: int = 0, received: int = 10, epoch: str = "e1", at: dt.datetime = T0, **kw: Any) -> BatchReport:
    values = {"duplicates": 0, "already_processed": 0, "processed": received, "failed": 0, "emitted": 0,
              "replayed": False, "seconds": 0.5, **kw}
    return BatchReport("stock", epoch, batch_id, received=received, finished_at=at, **values)


def test_a_replayed_batch_is_counted_once_and_a_new_epoch_counts_from_zero() -> None:
    record = add_report(None, _report(0, 10, duplicates=2))
    record = add_report(record, _report(1, 5, failed=1, parked=1))
    assert add_report(record, _report(1, 5)) is None      # the replay of batch 1
    assert add_report(record, _report(0, 10)) is None     # an older batch of the same epoch
    record = add_report(record, _report(0, 7, epoch="e2"))  # a new checkpoint restarts batch ids at 0
    s = summary("a.B", record, now=T0)
    assert s.totals == {"batches": 3, "received": 22, "processed": 22, "duplicates": 2, "failed": 1, "retried": 0,
                        "parked": 1}
    assert s.last_batch_id == 0 and s.last_batch == T0.isoformat()


def test_the_rate_is_received_per_second_over_the_last_minute() -> None:
    record = None
    for i in range(4):
        record = add_report(record, _report(i, 30, at=T0 + dt.timedelta(seconds=20 * i)))
    now = T0 + dt.timedelta(seconds=70)  # batches at 20, 40, 60 s are inside the minute; the one at 0 s is not
    assert summary("a.B", record, now=now).rate == 90 / 60
    assert summary("a.B", record, now=now + dt.timedelta(hours=1)).rate == 0.0
    assert summary("a.B", None, now=now).rate is None


def test_the_file_survives_a_new_reader_and_ignores_a_replay(tmp_path: Path) -> None:
    store = ReportStore(str(tmp_path), "stock.OrderPlaced")
    assert store.read() is None and store.counters().totals["batches"] == 0 and store.reports() == []
    assert store.record(_report(0, 4), driver="host-a") is True
    assert store.record(_report(0, 4)) is False
    again = ReportStore(str(tmp_path), "stock.OrderPlaced")  # another process reads the same file
    assert again.counters().totals["received"] == 4 and again.counters().last_driver == "host-a"
    assert (tmp_path / "status" / "stock.OrderPlaced.json").exists()
    assert not list((tmp_path / "status").glob("*.tmp-*"))


def test_reports_round_trip_newest_last_and_the_oldest_are_dropped(tmp_path: Path) -> None:
    store = ReportStore(str(tmp_path), "stock.OrderPlaced")
    assert store.counters().last_received is None
    first = _report(0, 7, phases={"read": 0.1}, published_from="driver", publish_partitions=1, retried=2)
    store.record(first)
    store.record(_report(1, 3, seconds=0.75))
    got = store.reports()
    assert got[0] == first and [r.batch_id for r in got] == [0, 1]
    last = store.counters()  # the last batch, from the same read as the totals
    assert (last.last_batch_id, last.last_received, last.last_seconds) == (1, 3, 0.75)
    record = store.read()
    for batch_id in range(2, KEEP + 5):
        record = add_report(record, _report(batch_id, 1))
    assert len(record["reports"]) == KEEP and record["reports"][-1]["batch_id"] == KEEP + 4


def test_a_file_of_an_older_safebunny_is_read_for_its_totals(tmp_path: Path) -> None:
    """Before the reports were stored here, the file held totals, an emitted count and a compact recent list."""
    old = {"epochs": {"e1": 3}, "recent": [[T0.isoformat(), 5, 0.2]], "batches": 4, "received": 20, "processed": 18,
           "duplicates": 2, "failed": 1, "retried": 1, "parked": 0, "emitted": 9, "last_batch": T0.isoformat(),
           "last_batch_id": 3, "last_driver": None}
    (tmp_path / "status").mkdir()
    (tmp_path / "status" / "s.T.json").write_bytes(orjson.dumps(old))
    store = ReportStore(str(tmp_path), "s.T")
    c = store.counters()
    assert (c.totals["batches"], c.totals["received"], c.rate, c.last_batch) == (4, 20, None, None)
    assert store.reports() == [] and store.counters().last_received is None
    assert store.record(_report(3, 5)) is False  # its epochs still keep a replay out
    assert store.record(_report(4, 5)) is True
    assert store.counters().totals["received"] == 25 and "recent" not in store.read()


def test_the_counter_names_are_spelled_once() -> None:
    """StepStatus shows each counter, and each but ``batches`` is a field of the batch report it sums."""
    from safebunny.saga.saga import StepStatus

    names = [f.name for f in dataclasses.fields(StepStatus)]
    assert [n for n in names if n in COUNTERS] == list(COUNTERS)
    assert set(COUNTERS) - {"batches"} <= {f.name for f in dataclasses.fields(BatchReport)}


def test_the_recorder_stores_each_batch_with_messages_once_and_drain_reads_its_total(tmp_path: Path) -> None:
    """A saga step's foreachBatch function stores the report its Step returned (retried and parked from the
    failure router); drain's progress is the stored received total, the same in any process."""
    import safebunny
    from safebunny.saga.run.drain import moved_so_far
    from safebunny.saga.run.queries import StepRecorder

    saga = safebunny.Saga("fulfilment", uri="amqp://guest:guest@127.0.0.1:5672/%2F", root=str(tmp_path))
    saga.step("stock", consumes="OrderPlaced", from_node="orders", schema="orderId string")(lambda df, ctx: None)
    step = saga.steps[0]
    batches = iter([_report(0, 6, failed=2, retried=1, parked=1), _report(1, 0), _report(0, 6, failed=2)])
    runtime = SimpleNamespace(process=lambda df, batch_id, handler, rows: next(batches))
    recorder = StepRecorder(saga, step, runtime)
    for batch_id in (0, 1, 0):  # a batch, an empty one (not stored), the first one replayed
        recorder.process(None, batch_id, None, rows=False)
    (stored,) = saga.reports_of(step)
    assert (stored.received, stored.retried, stored.parked) == (6, 1, 1)
    assert moved_so_far(saga) == 6
