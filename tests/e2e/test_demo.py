"""``make demo`` in a reduced size: the fulfilment saga on the real broker, Spark and Delta, and its
self-checks (shipped + compensated + poisoned = orders, nobody charged twice, no stock held for a
compensated order, duplicates dropped, nothing left in the queues)."""

from __future__ import annotations

import pytest

from safebunny.demo.main import main


def test_demo_passes_its_own_checks(spark, amqp_uri: str, tmp_path, unique_name: str,  # type: ignore[no-untyped-def]
                                    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("SAFEBUNNY_DEMO_URI", amqp_uri)
    rc = main(["--orders", "150", "--declined", "0.1", "--malformed", "0.04", "--duplicates", "0.1",
               "--dir", str(tmp_path / "demo"), "--name", unique_name, "--no-bar"], spark=spark)
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "checks: all passed" in out
    counts = {}
    for line in out.splitlines():
        label, _, number = line.strip().rpartition("  ")
        if number.strip().replace(",", "").isdigit():
            counts[label.strip()] = int(number.strip().replace(",", ""))
    assert counts["orders in"] == 150
    assert counts["shipped"] + counts["compensated"] + counts["poisoned"] == 150
    assert counts["compensated"] > 0 and counts["poisoned"] > 0
    assert counts["duplicates dropped"] >= counts["duplicates injected"] > 0
    chart = next(line.split(": ", 1)[1] for line in out.splitlines() if line.startswith("chart: "))
    with open(chart, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    # the demo removes its topology at the end (--keep keeps it)
    assert f"deleted saga {unique_name!r}'s" in out
    import pika

    conn = pika.BlockingConnection(pika.URLParameters(amqp_uri))
    try:
        with pytest.raises(pika.exceptions.ChannelClosedByBroker):
            conn.channel().queue_declare(f"{unique_name}.stock.OrderPlaced", passive=True)
    finally:
        if conn.is_open:
            conn.close()
