"""The restart record a supervisor or drain keeps per step query under the saga's root (saga.reports.RestartLog)."""

from __future__ import annotations

from pathlib import Path

from safebunny.saga.run.reports import RestartLog


def test_restarts_count_up_with_the_errors_first_line(tmp_path: Path) -> None:
    log = RestartLog(str(tmp_path), "stock.OrderPlaced")
    assert log.read() == {"count": 0, "last": None, "error": None}
    assert log.record("StreamingQueryException: boom\n  at line 2") == 1
    assert log.record(None) == 2
    again = RestartLog(str(tmp_path), "stock.OrderPlaced").read()  # another process reads the same file
    assert again["count"] == 2 and again["error"] is None and again["last"]
    assert (tmp_path / "status" / "stock.OrderPlaced.restarts.json").exists()
    assert RestartLog(str(tmp_path), "stock.OrderPlaced.shard.0").count() == 0


def test_a_restart_is_recorded_where_the_view_reads_it(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from safebunny.saga.run.queries import note_restart

    saga = SimpleNamespace(config=SimpleNamespace(name="shop", layout=SimpleNamespace(root=str(tmp_path))))
    note_restart(saga, "payment.StockReserved", RuntimeError("the provider is down"))  # type: ignore[arg-type]
    record = RestartLog(str(tmp_path), "payment.StockReserved").read()
    assert record["count"] == 1 and "the provider is down" in record["error"]
