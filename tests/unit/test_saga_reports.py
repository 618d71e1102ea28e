"""Stored batch reports (status over Spark Connect): one file per batch, a replay replaces its own."""

from __future__ import annotations

import datetime as dt

from safebunny.exactly_once.step import BatchReport
from safebunny.saga import reports
from safebunny.saga.reports import ReportLog


def _report(batch_id: int, received: int, epoch: str = "e1") -> BatchReport:
    return BatchReport("stock", epoch, batch_id, received, 1, 2, received - 3, 0, received - 3, False, 0.5,
                       dt.datetime(2026, 11, 23, 12, 0, batch_id, tzinfo=dt.timezone.utc), {"read": 0.1})


def test_reports_round_trip_and_a_replay_counts_once(tmp_path):
    log = ReportLog(str(tmp_path), "stock.OrderPlaced")
    assert log.read() == ([], {})
    log.write(_report(0, 10), {"retried": 1})
    log.write(_report(1, 5), {"poisoned": 2})
    log.write(_report(1, 5), {"poisoned": 2})  # batch 1 replayed: its file is replaced
    got, counts = ReportLog(str(tmp_path), "stock.OrderPlaced").read()
    assert [r.batch_id for r in got] == [0, 1] and got[0] == _report(0, 10)
    assert counts == {"retried": 1, "poisoned": 2}


def test_old_reports_are_pruned(tmp_path, monkeypatch):
    monkeypatch.setattr(reports, "KEEP", 3)
    monkeypatch.setattr(reports, "_PRUNE_EVERY", 2)
    log = ReportLog(str(tmp_path), "s")
    for batch in range(6):
        log.write(_report(batch, 4), {})
    assert len(list((tmp_path / "reports" / "s").glob("*.json"))) <= 4
    assert [r.batch_id for r in log.read()[0]][-3:] == [3, 4, 5]
