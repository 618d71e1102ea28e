# Databricks notebook source
# MAGIC %md
# MAGIC # An exactly-once saga
# MAGIC
# MAGIC Order placed → reserve stock → charge payment → ship; a declined payment triggers a compensation
# MAGIC step that releases the stock. Each step is one streaming query reading its node's queue through
# MAGIC `format("safebunny")`, dropping duplicates through its Delta inbox, applying its Delta effects
# MAGIC exactly once and publishing the next step's messages with ids derived from their causes.
# MAGIC Attach the `safebunny` wheel to the cluster; store the broker password in the secret scope
# MAGIC `safebunny` under `broker-password`. CI runs this notebook against a local broker.

# COMMAND ----------

dbutils.widgets.text("uri", "amqp://guest:guest@127.0.0.1:5672/%2F")  # noqa: F821
dbutils.widgets.text("workdir", "/tmp/safebunny-notebooks")  # noqa: F821  (on Databricks: a cloud URI, s3://..., abfss://...; not /Volumes)
# serverless compute allows only availableNow: set this widget to availableNow there (saga.run then runs rounds)
dbutils.widgets.text("trigger", "1 second")  # noqa: F821
uri = dbutils.widgets.get("uri")  # noqa: F821
workdir = dbutils.widgets.get("workdir")  # noqa: F821
trigger = dbutils.widgets.get("trigger")  # noqa: F821
try:
    password = dbutils.secrets.get("safebunny", "broker-password")  # noqa: F821  (never printed)
except Exception:  # no secret scope (a local run): the password, if any, is in the URI
    password = None

# COMMAND ----------

# MAGIC %md
# MAGIC ## Define the saga with the public API

# COMMAND ----------

import shutil
import uuid

from pyspark.sql import functions as F

import safebunny

safebunny.register(spark)  # noqa: F821  (only needed when the wheel was attached after the session started)
root = f"{workdir}/saga02"
shutil.rmtree(root, ignore_errors=True)
tables = {name: f"{root}/tables/{name}" for name in ("reservations", "payments", "shipments", "releases")}
DECLINED = "4000-0000-0000-0002"
ORDER = "orderId string, sku string, qty int, card string"

saga = safebunny.Saga(f"nb-fulfilment-{uuid.uuid4().hex[:6]}", uri=uri, password=password, root=root,
    settings=safebunny.SagaSettings(retry=safebunny.Retry(delays=("1s", "2s")), batch_size=500))


@saga.step("stock", consumes="OrderPlaced", from_node="orders", schema=ORDER, produces=["StockReserved"])
def reserve(orders, ctx):
    ok = orders.select("messageId", "orderId", "sku", "qty", "card")
    return safebunny.Outcome(effects=[safebunny.append(ok.drop("card"), tables["reservations"])],
                             emits=[safebunny.emit(ok, type="StockReserved")])


@saga.step("payment", consumes="StockReserved", from_node="stock", schema=ORDER,
           produces=["PaymentCharged", "PaymentDeclined"])
def charge(items, ctx):
    decided = items.withColumn("status", F.when(F.col("card") == DECLINED, "declined").otherwise("charged"))
    charged = decided.where("status = 'charged'").select("messageId", "orderId", "sku", "qty")
    declined = decided.where("status = 'declined'").select("messageId", "orderId", "sku", "qty")
    return safebunny.Outcome(effects=[safebunny.append(decided.select("messageId", "orderId", "status"),
                                                       tables["payments"])],
                             emits=[safebunny.emit(charged, type="PaymentCharged"),
                                    safebunny.emit(declined, type="PaymentDeclined")])


@saga.step("shipping", consumes="PaymentCharged", from_node="payment", schema="orderId string, sku string")
def ship(paid, ctx):
    return safebunny.Outcome(effects=[safebunny.append(paid.select("messageId", "orderId"), tables["shipments"])])


@saga.step("stock", consumes="PaymentDeclined", from_node="payment", schema="orderId string, qty int",
           compensates="OrderPlaced")
def release(declined, ctx):
    return safebunny.Outcome(effects=[safebunny.append(declined.select("messageId", "orderId", "qty"),
                                                       tables["releases"])])

# COMMAND ----------

# MAGIC %md
# MAGIC ## Start 40 orders, start 10 of them again (duplicates), and drain the saga

# COMMAND ----------

orders = spark.createDataFrame(  # noqa: F821
    [(f"o{i}", f"sku{i % 3}", 1 + i % 4, DECLINED if i % 8 == 5 else "4000-0000-0000-0001") for i in range(40)], ORDER)
saga.start(orders, node="orders", type="OrderPlaced", business_key="orderId")
saga.start(orders.limit(10), node="orders", type="OrderPlaced", business_key="orderId")  # the same ids again
saga.drain(spark)  # noqa: F821

# COMMAND ----------

# MAGIC %md
# MAGIC ## Every order has exactly one effect per step; the inbox dropped the duplicates

# COMMAND ----------


def show_delta(name, path):
    """A temp view of a Delta table: Spark Delta on Databricks, delta-rs where the session has no Delta."""
    try:
        df = spark.read.format("delta").load(path)  # noqa: F821
        df.columns  # analysed here: over Spark Connect a missing format fails only when the plan is analysed
    except Exception:
        from safebunny.delta.delta_rs import DeltaRsTarget

        df = spark.createDataFrame(DeltaRsTarget(path).read())  # noqa: F821
    df.createOrReplaceTempView(name)


for name, path in tables.items():
    show_delta(name, path)
show_delta("inbox", saga.inbox_path)

# COMMAND ----------

# MAGIC %sql
# MAGIC SELECT 'reservations' AS effect, count(*) AS rows, count(DISTINCT orderId) AS orders FROM reservations
# MAGIC UNION ALL SELECT 'payments', count(*), count(DISTINCT orderId) FROM payments
# MAGIC UNION ALL SELECT 'shipments', count(*), count(DISTINCT orderId) FROM shipments
# MAGIC UNION ALL SELECT 'releases', count(*), count(DISTINCT orderId) FROM releases

# COMMAND ----------

counts = {r.effect: (r.rows, r.orders) for r in spark.sql(  # noqa: F821
    "SELECT 'reservations' AS effect, count(*) AS rows, count(DISTINCT orderId) AS orders FROM reservations "
    "UNION ALL SELECT 'shipments', count(*), count(DISTINCT orderId) FROM shipments "
    "UNION ALL SELECT 'releases', count(*), count(DISTINCT orderId) FROM releases").collect()}
declined = sum(1 for i in range(40) if i % 8 == 5)
assert counts == {"reservations": (40, 40), "shipments": (40 - declined, 40 - declined),
                  "releases": (declined, declined)}, counts
dropped = sum(s.duplicates for s in saga.status())
assert dropped == 10, dropped
print(f"40 orders: 40 reserved, {40 - declined} shipped, {declined} released; {dropped} duplicates dropped")

# COMMAND ----------

# MAGIC %md
# MAGIC ## Run it continuously, stop it, restart it: nothing lost, nothing doubled

# COMMAND ----------

import time

running = saga.run(spark, trigger=trigger)  # noqa: F821
more = spark.createDataFrame([(f"o{i}", "sku1", 1, "4000-0000-0000-0001") for i in range(40, 60)], ORDER)  # noqa: F821
saga.start(more, node="orders", type="OrderPlaced", business_key="orderId")
time.sleep(5)  # let part of it through, then stop in the middle
running.stop()
saga.start(more, node="orders", type="OrderPlaced", business_key="orderId")  # and publish them all again
saga.drain(spark)  # noqa: F821  (the same checkpoints: the queries go on where they stopped)
for name, path in tables.items():
    show_delta(name, path)
again = spark.sql("SELECT count(*) AS n, count(DISTINCT orderId) AS d FROM shipments").first()  # noqa: F821
assert again.n == again.d == 60 - declined, again
print(f"after stop and restart: {again.n} shipments, one per order")

# COMMAND ----------

# MAGIC %md
# MAGIC ## The same ids from SQL, through the JVM shim

# COMMAND ----------

import safebunny.spark.shim

safebunny.spark.shim.register(spark)  # noqa: F821
first = spark.sql("SELECT messageId, causationId FROM inbox WHERE node = 'payment' LIMIT 1").first()  # noqa: F821
python_id = safebunny.message_id(first.causationId, "stock", "StockReserved", 0)
sql_id = spark.sql(  # noqa: F821
    f"SELECT safebunny_message_id('{first.causationId}', 'stock', 'StockReserved', 0) AS id").first().id
assert sql_id == python_id == first.messageId, (sql_id, python_id, first.messageId)
print(f"SQL and Python derive the same id: {sql_id}")

# COMMAND ----------

safebunny.topology.delete(saga)
