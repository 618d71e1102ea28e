"""``make demo``: one saga step end to end against the local broker.

1. Declares ``safebunny-demo.orders`` (a quorum queue) and ``safebunny-demo.billing``
   (classic), empties them, and publishes 3,000 ``OrderPlaced`` messages whose ids and
   correlation ids come from :mod:`safebunny.ids`.
2. Runs a streaming query, ``readStream.format("safebunny")`` on the orders queue with
   ``trigger(availableNow=True)`` and 1,000 messages a batch. Each batch (a) appends the
   orders to a Delta table with delta-rs, idempotently per batch (Delta app transaction:
   app id + batch id, so a replayed batch is skipped), and (b) publishes one
   ``InvoiceRequested`` per order with ``df.write.format("safebunny")`` (publisher confirms,
   ids derived from the order's id).
3. Prints the counts and exits non-zero if any is off.

Set ``SAFEBUNNY_DEMO_URI`` to use another broker; work files go to ``.demo/``.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

import orjson

from safebunny.demo.broker import ensure_broker
from safebunny.ids import correlation_id_for, saga_start
from safebunny.uri import redact

__all__ = ["main"]

ORDERS = "safebunny-demo.orders"
BILLING = "safebunny-demo.billing"
N = 3000


def _publish_orders(uri: str) -> None:
    import pika

    conn = pika.BlockingConnection(pika.URLParameters(uri))
    ch = conn.channel()
    ch.queue_declare(ORDERS, durable=True, arguments={"x-queue-type": "quorum"})
    ch.queue_declare(BILLING, durable=True)
    ch.queue_purge(ORDERS)
    ch.queue_purge(BILLING)
    ch.confirm_delivery()
    for i in range(N):
        correlation, message = saga_start(correlation_id_for(f"order-{i}"), "orders", "OrderPlaced")
        body = orjson.dumps({"orderId": f"order-{i}", "amount": round(10 + i * 0.37, 2), "currency": "EUR"})
        props = pika.BasicProperties(message_id=message, correlation_id=correlation, delivery_mode=2,
                                     content_type="application/json", type="OrderPlaced")
        ch.basic_publish("", ORDERS, body, props)
    conn.close()


def _depth(uri: str, queue: str) -> int:
    import pika

    conn = pika.BlockingConnection(pika.URLParameters(uri))
    try:
        return conn.channel().queue_declare(queue, passive=True).method.message_count
    finally:
        conn.close()


def main() -> int:
    uri = os.environ.get("SAFEBUNNY_DEMO_URI", "amqp://guest:guest@127.0.0.1:5672/%2F")
    ensure_broker(uri, explicit="SAFEBUNNY_DEMO_URI" in os.environ)
    work = Path(os.environ.get("SAFEBUNNY_DEMO_DIR", ".demo")).resolve()
    shutil.rmtree(work, ignore_errors=True)
    table = str(work / "orders_delta")
    print(f"safebunny demo: broker {redact(uri)}, work dir {work}")
    _publish_orders(uri)
    print(f"published {N} OrderPlaced messages to {ORDERS}")

    from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (SparkSession.builder.master("local[2]").appName("safebunny-demo")
             .config("spark.ui.enabled", "false").config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    app_id = "safebunny-demo-orders"

    def step(batch, batch_id: int) -> None:
        batch = batch.persist()
        orders = batch.select(
            "messageId", "correlationId", "redelivered",
            F.get_json_object(F.col("value").cast("string"), "$.orderId").alias("orderId"),
            F.get_json_object(F.col("value").cast("string"), "$.amount").cast("double").alias("amount"),
        )
        done = DeltaTable(table).transaction_version(app_id) if DeltaTable.is_deltatable(table) else None
        if done is None or done < batch_id:
            write_deltalake(table, orders.toArrow(), mode="append",
                            commit_properties=CommitProperties(app_transactions=[Transaction(app_id, batch_id)]))
        invoices = batch.select(
            F.to_json(F.struct(
                F.get_json_object(F.col("value").cast("string"), "$.orderId").alias("orderId"),
                F.get_json_object(F.col("value").cast("string"), "$.amount").alias("amount"),
            )).alias("value"),
            F.col("messageId").alias("causationId"),
            "correlationId",
        )
        (invoices.write.format("safebunny").option("uri", uri).option("exchange", "")
         .option("routingKey", BILLING).option("node", "billing").option("type", "InvoiceRequested")
         .option("contentType", "application/json").mode("append").save())
        batch.unpersist()

    started = time.monotonic()
    query = (spark.readStream.format("safebunny").option("uri", uri).option("queue", ORDERS)
             .option("journalLocation", str(work / "journal")).option("maxMessagesPerTrigger", "1000").load()
             .writeStream.foreachBatch(step).option("checkpointLocation", str(work / "checkpoint"))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    elapsed = time.monotonic() - started
    batches = [p["numInputRows"] for p in query.recentProgress]
    spark.stop()

    rows = DeltaTable(table).to_pyarrow_table()
    ids = rows.column("messageId").to_pylist()
    billing = _depth(uri, BILLING)
    left = _depth(uri, ORDERS)
    print(f"micro-batches (rows each): {batches}  in {elapsed:.1f}s")
    print(f"Delta table {table}: {rows.num_rows} rows, {len(set(ids))} distinct message ids")
    print(f"{BILLING}: {billing} InvoiceRequested messages waiting; {ORDERS}: {left} left unconsumed")
    ok = rows.num_rows == N and len(set(ids)) == N and billing == N and left == 0
    print("demo OK" if ok else "demo FAILED: counts differ from the number published")
    return 0 if ok else 1

