"""The demo's monitor on a real query: throughput from Spark's progress events per step, backlog
sampled from the broker, both keyed by the step's label."""

from __future__ import annotations

from helpers import publish_numbered, wait_until


def test_monitor_follows_a_real_query(spark, amqp_uri: str, make_queue, tmp_path, admin) -> None:  # type: ignore[no-untyped-def]
    from safebunny.demo.monitor import Monitor

    queue = make_queue("quorum")
    publish_numbered(amqp_uri, queue, 300)
    wait_until(lambda: admin.ready(queue) == 300, what="300 messages ready")
    with Monitor(spark, amqp_uri, {"stock.OrderPlaced": queue}, expected=300, every=0.2, show_bar=False) as mon:
        wait_until(lambda: mon.backlog["stock.OrderPlaced"], what="a first backlog sample")
        query = (spark.readStream.format("safebunny").option("uri", amqp_uri).option("queue", queue)
                 .option("journalLocation", str(tmp_path / "journal")).option("maxMessagesPerTrigger", "100").load()
                 .writeStream.format("noop").queryName("demo-test.stock.OrderPlaced")
                 .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start())
        query.awaitTermination(120)
        wait_until(lambda: mon.processed["stock.OrderPlaced"] == 300, what="progress events for 300 rows")
        wait_until(lambda: mon.backlog["stock.OrderPlaced"][-1][1] == 0, what="a backlog sample of 0")
    samples = mon.backlog["stock.OrderPlaced"]
    assert samples[0][1] == 300
    assert [t for t, _ in samples] == sorted(t for t, _ in samples)
    rates = mon.throughput["stock.OrderPlaced"]
    assert len(rates) >= 3 and all(r >= 0 for _, r in rates) and any(r > 0 for _, r in rates)
