"""Saga instances as a table, for ``saga.instances()`` (a DataFrame and a SQL view) and ``safebunny instances``;
and how ``saga.start`` starts them: one first message per row, ids from a business key, and a started record.

Derived from what is durable (docs/operations.md, "Saga instances"): the steps' inbox rows within the dedupe
window, the poison queues (only those that hold messages), and the started records ``saga.start`` appends
to ``<root>/started`` (a Delta table: businessKey, correlationId, node, type, startedAt), which make an
instance visible before its first step runs. States: :mod:`safebunny.saga.look.instance_state`.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

import pyarrow as pa

from safebunny.delta.backend import delta_target
from safebunny.errors import SafeBunnyOptionError
from safebunny.exactly_once import Inbox
from safebunny.ids import correlation_id_for, message_id
from safebunny.options.sink import SinkOptions
from safebunny.saga.define import topology
from safebunny.saga.define.config import SagaConfig, SagaShape
from safebunny.saga.look.instance_state import INSTANCE_SCHEMA, STATES, instance_rows
from safebunny.saga.look.parked import read_all_parked
from safebunny.spark.session import publish, session_or_raise

__all__ = ["instances_table", "view_name", "waiting_since"]

STARTED_SCHEMA = pa.schema([("businessKey", pa.string()), ("correlationId", pa.string()), ("node", pa.string()),
                            ("type", pa.string()), ("startedAt", pa.timestamp("us", tz="UTC"))])
_INBOX_COLUMNS = ["node", "messageId", "correlationId", "type", "status", "reason", "emitted", "processedAt"]


def view_name(config: SagaConfig) -> str:
    """The SQL view ``saga.instances()`` registers: ``<saga name>_instances``, other characters than letters,
    digits and ``_`` replaced by ``_`` (saga ``shop-eu`` -> ``shop_eu_instances``)."""
    return re.sub(r"\W", "_", f"{config.name}_instances")


def check_keys(df: Any, business_key: str) -> None:
    """Refuse a missing ``business_key`` column, or rows whose key is null or blank (they would all become one
    instance), before anything is published."""
    from pyspark.sql import functions as F

    if business_key not in df.columns:
        raise SafeBunnyOptionError(
            f"saga.start(business_key={business_key!r}): no such column; columns: {df.columns}.", "business_key")
    key = F.col(business_key)
    blank = df.where(key.isNull() | (F.trim(key.cast("string")) == "")).count()
    if blank:
        raise SafeBunnyOptionError(
            f"saga.start(business_key={business_key!r}): {blank} row(s) have a null or empty {business_key!r}; "
            "each row needs its own key (it names the saga instance). Nothing was published: fill or filter "
            "those rows and start again.", "business_key")


def publish_first(saga: SagaShape, df: Any, node: str, message_type: str, business_key: str) -> None:
    """Publish one message of ``message_type`` from ``node`` per row of ``df`` (the row as a JSON object), with
    the message id and correlation id derived from the ``business_key`` column."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType

    config = saga.config
    corr = F.udf(lambda k: correlation_id_for(str(k)), StringType())
    mid = F.udf(lambda k: message_id(correlation_id_for(str(k)), node, message_type, 0), StringType())
    columns = [F.to_json(F.struct(*df.columns)).alias("value"), mid(F.col(business_key)).alias("messageId"),
               corr(F.col(business_key)).alias("correlationId"), F.lit(message_type).alias("type"),
               F.lit("application/json").alias("contentType")]
    routing_key = None
    if topology.routes_by_instance(saga, node, message_type):  # a sharded step consumes it: each row to its bucket
        route = F.udf(lambda k: topology.instance_routing_key(node, message_type, correlation_id_for(str(k))),
                      StringType())
        columns.append(route(F.col(business_key)).alias("routingKey"))
    else:
        routing_key = topology.routing_key(node, message_type)
    options = SinkOptions(connection=config.connection, exchange=topology.exchange_name(config),
                          routing_key=routing_key)
    publish(df.select(*columns), **options.spark_options())


def record_started(config: SagaConfig, df: Any, business_key: str, node: str, message_type: str) -> int:
    """Append the business keys of ``df`` (the rows ``saga.start`` published) to the started records."""
    keys = df.select(df[business_key].cast("string").alias("k")).distinct().toArrow().column("k").to_pylist()
    keys = [k for k in keys if k is not None and k.strip()]
    if not keys:
        return 0
    now = dt.datetime.now(dt.timezone.utc)
    table = pa.Table.from_pydict({"businessKey": keys, "correlationId": [correlation_id_for(k) for k in keys],
                                  "node": [node] * len(keys), "type": [message_type] * len(keys),
                                  "startedAt": [now] * len(keys)}, schema=STARTED_SCHEMA)
    delta_target(config.layout.started).append(table)
    return len(keys)


def instances_table(saga: SagaShape, state: str | None = None, parked: list[Any] | None = None) -> pa.Table:
    """One row per instance of ``saga`` (:data:`~safebunny.saga.look.instance_state.INSTANCE_SCHEMA`), newest
    update first; ``state`` keeps one state. ``parked``: every step's parked messages, all states
    (``read_parked(..., all=True)``), when the caller read them already."""
    if state is not None and state not in STATES:
        raise SafeBunnyOptionError(f"state must be one of {', '.join(STATES)}; got {state!r}.", "state")
    inbox = Inbox(saga.config.layout.inbox, "instances").rows(all_nodes=True)
    started = delta_target(saga.config.layout.started).read()
    if parked is None:
        parked = [p for found in read_all_parked(saga).values() for p in found]
    stuck = [p for p in parked if p.state != "resolved"]
    table = instance_rows(inbox.select(_INBOX_COLUMNS).to_pylist(), saga.steps, stuck,
                          started.to_pylist() if started is not None else ())
    if state is not None:
        import pyarrow.compute as pc

        table = table.filter(pc.equal(table.column("state"), state))
    return table


def waiting_since(rows: list[dict[str, Any]]) -> dict[str, dt.datetime]:
    """Per step, the oldest ``waitingSince`` of the running instances (``instances_table`` rows) waiting there."""
    out: dict[str, dt.datetime] = {}
    for r in rows:
        if r["state"] == "running" and r["step"] and r["waitingSince"] is not None:
            for label in r["step"].split(", "):
                out[label] = min(out.get(label, r["waitingSince"]), r["waitingSince"])
    return out


def instances_frame(saga: SagaShape, spark: Any = None, state: str | None = None) -> Any:
    """:func:`instances_table` as a DataFrame in ``spark`` (or the active session), also registered as the
    temporary view :func:`view_name` (all states, whatever ``state`` filters in the returned frame)."""
    if state is not None and state not in STATES:
        raise SafeBunnyOptionError(f"state must be one of {', '.join(STATES)}; got {state!r}.", "state")
    from pyspark.sql.pandas.types import from_arrow_schema

    session = session_or_raise(spark, "saga.instances(...)", "'safebunny instances'")
    table = instances_table(saga)
    frame = session.createDataFrame(table if table.num_rows else INSTANCE_SCHEMA.empty_table(),
                                    schema=from_arrow_schema(INSTANCE_SCHEMA))  # the same columns, one schema
    frame.createOrReplaceTempView(view_name(saga.config))
    return frame if state is None else frame.where(frame.state == state)
