"""Publishing the first messages of saga instances (``saga.start``), one per row, ids from a business key."""

from __future__ import annotations

from typing import Any

from safebunny.errors import SafeBunnyOptionError
from safebunny.ids import correlation_id_for, message_id
from safebunny.options.connection import ConnectionSettings
from safebunny.options.sink import SinkOptions
from safebunny.saga import topology
from safebunny.saga.config import SagaShape
from safebunny.spark.session import publish

__all__: list[str] = []


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
    options = SinkOptions(ConnectionSettings(config.uri, config.password), exchange=topology.exchange_name(config),
                          routing_key=routing_key)
    publish(df.select(*columns), **options.spark_options())
