"""Saga instances as a table, for ``saga.instances()`` (a DataFrame and a SQL view) and ``safebunny instances``.

Derived from what is durable (docs/operations.md, "Saga instances"): the steps' inbox rows within the dedupe
window, the poison queues (only those that hold messages), and the started records ``saga.start`` appends
to ``<root>/started`` (a Delta table: businessKey, correlationId, node, type, startedAt), which make an
instance visible before its first step runs. States: :mod:`safebunny.saga.instance_state`.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

import pyarrow as pa

from safebunny.delta.backend import delta_target
from safebunny.errors import SafeBunnyOptionError
from safebunny.exactly_once import Inbox
from safebunny.ids import correlation_id_for
from safebunny.saga.config import SagaConfig, SagaShape
from safebunny.saga.instance_state import INSTANCE_SCHEMA, STATES, Parked, instance_rows
from safebunny.saga.parked import read_all_parked
from safebunny.spark.session import session_or_raise

__all__ = ["instances_table", "view_name"]

STARTED_SCHEMA = pa.schema([("businessKey", pa.string()), ("correlationId", pa.string()), ("node", pa.string()),
                            ("type", pa.string()), ("startedAt", pa.timestamp("us", tz="UTC"))])
_INBOX_COLUMNS = ["node", "messageId", "correlationId", "type", "status", "reason", "emitted", "processedAt"]


def view_name(config: SagaConfig) -> str:
    """The SQL view ``saga.instances()`` registers: ``<saga name>_instances``, other characters than letters,
    digits and ``_`` replaced by ``_`` (saga ``shop-eu`` -> ``shop_eu_instances``)."""
    return re.sub(r"\W", "_", f"{config.name}_instances")


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
    """One row per instance of ``saga`` (:data:`~safebunny.saga.instance_state.INSTANCE_SCHEMA`), newest
    update first; ``state`` keeps one state. ``parked``: every step's parked messages, all states
    (``read_parked(..., all=True)``), when the caller read them already."""
    if state is not None and state not in STATES:
        raise SafeBunnyOptionError(f"state must be one of {', '.join(STATES)}; got {state!r}.", "state")
    inbox = Inbox(saga.config.layout.inbox, "instances").rows(all_nodes=True)
    started = delta_target(saga.config.layout.started).read()
    stuck = [Parked(p.step, p.messageId, p.correlationId, p.discardReason, "discarded") if p.state == "discarded"
             else Parked(p.step, p.messageId, p.correlationId, p.reason)  # discarded ones have their own state
             for p in (parked if parked is not None else [p for found in read_all_parked(saga).values() for p in found])
             if p.state != "resolved"]
    table = instance_rows(inbox.select(_INBOX_COLUMNS).to_pylist(), saga.steps, stuck,
                          started.to_pylist() if started is not None else ())
    if state is not None:
        import pyarrow.compute as pc

        table = table.filter(pc.equal(table.column("state"), state))
    return table


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
