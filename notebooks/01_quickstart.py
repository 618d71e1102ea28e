# Databricks notebook source
# MAGIC %md
# MAGIC # safebunny quickstart
# MAGIC
# MAGIC One saga step on a cluster: read `OrderPlaced` messages from a RabbitMQ queue with
# MAGIC `readStream.format("safebunny")` (acked only after each micro-batch commits), keep them in a
# MAGIC Delta table, and publish one `InvoiceRequested` per order with `write.format("safebunny")`
# MAGIC (publisher confirms, ids derived from the order's id). Attach the `safebunny` wheel to the
# MAGIC cluster first. CI runs this notebook against a local broker (`make notebooks`).

# COMMAND ----------

dbutils.widgets.text("uri", "amqp://guest:guest@127.0.0.1:5672/%2F")  # noqa: F821
dbutils.widgets.text("workdir", "/tmp/safebunny-notebook")  # noqa: F821
uri = dbutils.widgets.get("uri")  # noqa: F821
workdir = dbutils.widgets.get("workdir")  # noqa: F821
orders, billing, n = "notebook.orders", "notebook.billing", 1000

# COMMAND ----------

# MAGIC %md
# MAGIC ## Publish a few orders (a saga's first step: ids from the business key)

# COMMAND ----------

import shutil

import orjson
import pika

import safebunny

safebunny.register(spark)  # noqa: F821  (only needed when the wheel was attached after the session started)
shutil.rmtree(workdir, ignore_errors=True)
conn = pika.BlockingConnection(pika.URLParameters(uri))
ch = conn.channel()
ch.queue_declare(orders, durable=True, arguments={"x-queue-type": "quorum"})
ch.queue_declare(billing, durable=True)
ch.queue_purge(orders)
ch.queue_purge(billing)
ch.confirm_delivery()
for i in range(n):
    correlation_id, message_id = safebunny.saga_start(safebunny.correlation_id_for(f"order-{i}"), "orders",
                                                      "OrderPlaced")
    ch.basic_publish("", orders, orjson.dumps({"orderId": f"order-{i}", "amount": i % 97}),
                     pika.BasicProperties(message_id=message_id, correlation_id=correlation_id, delivery_mode=2))
conn.close()

# COMMAND ----------

# MAGIC %md
# MAGIC ## Read them exactly once and publish the next step

# COMMAND ----------

from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from pyspark.sql import functions as F

table = f"{workdir}/orders"


def step(batch, batch_id):
    # effect 1: a Delta append, skipped when this batch id was already written (a replay)
    done = DeltaTable(table).transaction_version("notebook") if DeltaTable.is_deltatable(table) else None
    if done is None or done < batch_id:
        write_deltalake(table, batch.select("messageId", "correlationId", "value").toArrow(), mode="append",
                        commit_properties=CommitProperties(app_transactions=[Transaction("notebook", batch_id)]))
    # effect 2: the next saga step's messages, ids derived from the causing message
    (batch.select(F.col("value"), F.col("messageId").alias("causationId"), "correlationId")
     .write.format("safebunny").option("uri", uri).option("routingKey", billing)
     .option("node", "billing").option("type", "InvoiceRequested").mode("append").save())


query = (spark.readStream.format("safebunny").option("uri", uri).option("queue", orders)  # noqa: F821
         .option("journalLocation", f"{workdir}/journal").option("maxMessagesPerTrigger", "400").load()
         .writeStream.foreachBatch(step).option("checkpointLocation", f"{workdir}/checkpoint")
         .trigger(availableNow=True).start())
query.awaitTermination()

# COMMAND ----------

# MAGIC %md
# MAGIC ## The same ids from SQL, through the JVM shim

# COMMAND ----------

import safebunny.spark.shim

safebunny.spark.shim.register(spark)  # noqa: F821

# COMMAND ----------

# MAGIC %sql
# MAGIC CREATE OR REPLACE TEMP VIEW notebook_ids AS
# MAGIC SELECT safebunny_message_id('order-1', 'billing', 'InvoiceRequested', 0) AS sql_id

# COMMAND ----------

rows = DeltaTable(table).to_pyarrow_table()
conn = pika.BlockingConnection(pika.URLParameters(uri))
waiting = conn.channel().queue_declare(billing, passive=True).method.message_count
left = conn.channel().queue_declare(orders, passive=True).method.message_count
conn.close()
sql_id = spark.table("notebook_ids").first().sql_id  # noqa: F821
print(f"Delta rows {rows.num_rows}, distinct ids {len(set(rows.column('messageId').to_pylist()))}, "
      f"invoices waiting {waiting}, orders left {left}")
assert rows.num_rows == n and waiting == n and left == 0
assert sql_id == safebunny.message_id("order-1", "billing", "InvoiceRequested", 0)

# COMMAND ----------

# MAGIC %md
# MAGIC ## Clean up: the two queues go (on a cluster, keep them to look around)

# COMMAND ----------

conn = pika.BlockingConnection(pika.URLParameters(uri))
conn.channel().queue_delete(orders)
conn.channel().queue_delete(billing)
conn.close()
