# Databricks notebook source
# MAGIC %md
# MAGIC # Operating a saga
# MAGIC
# MAGIC Status per step (the counters every batch records under the saga's root, so any process reads the
# MAGIC same numbers), the saga instances as a SQL view, Prometheus metrics, the poison queue and a redrive
# MAGIC after a fix, the trace of one order through the steps' inboxes, and plots of throughput and backlog
# MAGIC per step from the queries' progress, and the whole saga as one picture (`saga.view()`). The same functions
# MAGIC back the `safebunny` command line (`safebunny status`, `safebunny instances`, `safebunny poison list|redrive`,
# MAGIC `safebunny trace`, `safebunny view`).
# MAGIC CI runs this notebook against a local broker.

# COMMAND ----------

dbutils.widgets.text("uri", "amqp://guest:guest@127.0.0.1:5672/%2F")  # noqa: F821
dbutils.widgets.text("workdir", "/tmp/safebunny-notebooks")  # noqa: F821  (on Databricks: a cloud URI, s3://..., abfss://...; not /Volumes)
# serverless compute allows only availableNow: set this widget to availableNow there (saga.run then runs rounds)
dbutils.widgets.text("trigger", "500 milliseconds")  # noqa: F821
uri = dbutils.widgets.get("uri")  # noqa: F821
workdir = dbutils.widgets.get("workdir")  # noqa: F821
trigger = dbutils.widgets.get("trigger")  # noqa: F821
try:
    password = dbutils.secrets.get("safebunny", "broker-password")  # noqa: F821  (never printed)
except Exception:  # no secret scope (a local run): the password, if any, is in the URI
    password = None

# COMMAND ----------

# MAGIC %md
# MAGIC ## A small saga whose payment step rejects one order until it is fixed

# COMMAND ----------

import os
import shutil
import time
import uuid

import pandas as pd

import safebunny

safebunny.register(spark)  # noqa: F821
root = f"{workdir}/saga03"
shutil.rmtree(root, ignore_errors=True)
fixed = f"{root}/payment-fixed"  # the "fix": a file, which the handler sees wherever it runs (on serverless, the server)
saga = safebunny.Saga(f"nb-ops-{uuid.uuid4().hex[:6]}", uri=uri, password=password, root=root,
    settings=safebunny.SagaSettings(retry=safebunny.Retry(delays=("1s", "1s")), batch_size=100))


@saga.step("stock", consumes="OrderPlaced", from_node="orders", schema="orderId string, qty int",
           produces=["StockReserved"])
def reserve(orders, ctx):
    ok = orders.select("messageId", "orderId", "qty")
    return safebunny.Outcome(effects=[safebunny.append(ok, f"{root}/tables/reservations")],
                             emits=[safebunny.emit(ok, type="StockReserved")])


@saga.step("payment", consumes="StockReserved", from_node="stock", schema="orderId string, qty int", rows=True,
           produces=["PaymentCharged"])
def charge(msg, ctx):  # one call per message, as to a payment provider (ctx.message_id is the idempotency key)
    if msg["orderId"] == "o7" and not os.path.exists(fixed):
        raise ConnectionRefusedError("the provider refuses order o7")
    return safebunny.Outcome(emits=[safebunny.emit({"orderId": msg["orderId"]}, type="PaymentCharged")])


@saga.step("shipping", consumes="PaymentCharged", from_node="payment", schema="orderId string")
def ship(paid, ctx):
    return safebunny.Outcome(effects=[safebunny.append(paid.select("messageId", "orderId"),
                                                       f"{root}/tables/shipments")])

# COMMAND ----------

# MAGIC %md
# MAGIC ## Run it and record throughput and backlog per step from the queries' progress

# COMMAND ----------

from safebunny.saga import SagaMetrics

metrics = SagaMetrics(saga, port=0).start(spark)  # noqa: F821  (a fixed port, 9108 by default, in production)
running = saga.run(spark, trigger=trigger)  # noqa: F821
orders = spark.createDataFrame([(f"o{i}", 1 + i % 3) for i in range(300)], "orderId string, qty int")  # noqa: F821
saga.start(orders, node="orders", type="OrderPlaced", business_key="orderId")
samples, started = [], time.monotonic()
deadline = started + 180
while time.monotonic() < deadline:
    for s in saga.status():
        query = running.queries[f"{s.node}.{s.type}"]
        progress = query.lastProgress or {}
        samples.append({"t": time.monotonic() - started, "step": f"{s.node}.{s.type}", "backlog": s.backlog or 0,
                        "rows_per_s": progress.get("processedRowsPerSecond") or 0.0, "parked": s.parked})
    status = saga.status()
    if sum(s.processed for s in status if s.node == "shipping") >= 299 and any(s.parked for s in status):
        break
    time.sleep(0.5)
running.stop()
history = pd.DataFrame(samples)

# COMMAND ----------

# MAGIC %md
# MAGIC ## Status per step

# COMMAND ----------

status = pd.DataFrame([s.to_dict() for s in saga.status()])
print(status[["node", "type", "backlog", "retrying", "poisoned", "batches", "received", "processed", "duplicates",
              "retried", "parked", "breaker"]].to_string(index=False))
assert int(status.loc[status.node == "shipping", "processed"].iloc[0]) == 299
print("\n".join(sorted({n for n in status.note if n})))  # why unacked is empty, when it is

# COMMAND ----------

# MAGIC %md
# MAGIC ## Saga instances as SQL
# MAGIC
# MAGIC `saga.instances()` registers the view `<saga name>_instances` (`-` as `_`): one row per order with its
# MAGIC business key, state (running, retrying, parked, compensated, completed), current or last step,
# MAGIC started, last update and steps done. `safebunny instances <saga> --state parked` shows the same.

# COMMAND ----------

from safebunny.saga.look.instances import view_name

saga.instances(spark)  # noqa: F821
view = view_name(saga)
by_state = spark.sql(f"SELECT state, count(*) AS n FROM {view} GROUP BY state ORDER BY state")  # noqa: F821
by_state.show()
stuck = spark.sql(f"SELECT businessKey, step, reason FROM {view} WHERE state = 'parked'").collect()  # noqa: F821
assert [(r.businessKey, r.step) for r in stuck] == [("o7", "payment.StockReserved")]
assert dict(by_state.collect())["completed"] == 299

# COMMAND ----------

# MAGIC %md
# MAGIC ## Prometheus metrics
# MAGIC
# MAGIC `SagaMetrics(saga).start(spark)` serves `/metrics` (port 9108 by default): per step the counters,
# MAGIC backlog, retry depth, unacked, and each query's rates from a `StreamingQueryListener`.

# COMMAND ----------

import urllib.request

with urllib.request.urlopen(metrics.url, timeout=30) as response:
    scraped = response.read().decode()
print("\n".join(line for line in scraped.splitlines() if "_total" in line and "payment" in line))
assert f'safebunny_step_parked_total{{saga="{saga.name}",step="payment.StockReserved"}} 1' in scraped
metrics.stop()  # in production it runs as long as the saga does

# COMMAND ----------

# MAGIC %md
# MAGIC ## Throughput and backlog per step over time

# COMMAND ----------

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

plots = f"{workdir}/plots"
os.makedirs(plots, exist_ok=True)
fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
for step, rows in history.groupby("step"):
    top.plot(rows.t, rows.rows_per_s, label=step)
    bottom.plot(rows.t, rows.backlog, label=step)
top.set_ylabel("rows/s (last batch)")
bottom.set_ylabel("messages waiting")
bottom.set_xlabel("seconds")
top.legend(loc="upper right")
top.set_title(f"saga {saga.name}")
fig.savefig(f"{plots}/03_throughput_backlog.png", dpi=80)
print(f"{plots}/03_throughput_backlog.png")

# COMMAND ----------

# MAGIC %md
# MAGIC ## The poison queue, then a redrive after the fix

# COMMAND ----------

parked = saga.poison("payment", "StockReserved")
parked.select("messageId", "correlationId", "attempts", "errorType", "reason").show(truncate=80)
assert parked.count() == 1 and "refuses order o7" in parked.first().reason

open(fixed, "w").close()  # the fix is deployed
print("redriven:", saga.redrive("payment", "StockReserved"))
saga.drain(spark)  # noqa: F821
shipped = safebunny.Inbox(saga.inbox_path, "shipping").rows().to_pylist()
assert len([r for r in shipped if r["status"] == "done"]) == 300
saga.instances(spark)  # noqa: F821  (the view again, after the redrive)
assert spark.sql(f"SELECT state, count(*) FROM {view} GROUP BY state").collect() == [("completed", 300)]  # noqa: F821

# COMMAND ----------

# MAGIC %md
# MAGIC ## The trace of one order through the steps

# COMMAND ----------

trace = pd.DataFrame([e.to_dict() for e in saga.trace("o7")])
print(trace[["node", "status", "attempts", "messageId", "causationId", "reason"]].to_string(index=False))
assert trace.node.iloc[0] == "stock" and trace.node.iloc[-1] == "shipping" and "failed" in set(trace.status)

# COMMAND ----------

# MAGIC %md
# MAGIC ## The saga as a picture
# MAGIC
# MAGIC `saga.view()` is one self-contained HTML page (no network access when shown): the saga's flow as a graph,
# MAGIC per step its queue depth, rates, last batch, restarts and parked count, the instances by state with the
# MAGIC oldest stuck ones, the poison list, and with `instance=` that instance's trace as a timeline. It reads the
# MAGIC same durable state as `saga.status()`, so any process (or a Spark Connect client) shows the same. Outside a
# MAGIC notebook, `safebunny view <saga>` serves it on a local port.

# COMMAND ----------

page = saga.view(instance="o7")
displayHTML(page)  # noqa: F821  (Databricks; in Jupyter, `page` as a cell's last line renders it too)
steps = {s["label"]: s for s in page.data["steps"]}
assert steps["shipping.PaymentCharged"]["status"]["processed"] == 300
assert page.data["instances"]["counts"]["completed"] == 300
assert [e["node"] for e in page.data["trace"]][-1] == "shipping"

# COMMAND ----------

safebunny.topology.delete(saga)
