"""safebunny: exactly-once RabbitMQ sagas on Spark Structured Streaming.

The core library (ids, options, AMQP client, topology, journal, inbox, saga) works
without Spark; the Spark data source lives in the ``pyspark_safebunny`` plugin module,
which Spark finds by itself once the package is installed.
"""

from __future__ import annotations

from typing import Any

from safebunny.errors import (
    SafeBunnyBrokerError,
    SafeBunnyDataLossError,
    SafeBunnyError,
    SafeBunnyInboxConflictError,
    SafeBunnyOptionError,
    SafeBunnyPublishError,
)
from safebunny.ids import correlation_id_for, message_id, new_correlation_id, saga_start

__all__ = [
    "__version__",
    "FORMAT",
    "register",
    "message_id",
    "correlation_id_for",
    "new_correlation_id",
    "saga_start",
    "SafeBunnyError",
    "SafeBunnyOptionError",
    "SafeBunnyBrokerError",
    "SafeBunnyPublishError",
    "SafeBunnyDataLossError",
    "SafeBunnyInboxConflictError",
]

__version__ = "0.1.0"
FORMAT = "safebunny"


def register(spark: Any) -> None:
    """Register the ``safebunny`` data source with ``spark`` explicitly.

    Installing the package is enough for sessions started after the install; call this in
    a session whose JVM looked up data sources before the install (a notebook that was
    already running when the package was attached).
    """
    from pyspark_safebunny import DefaultSource

    spark.dataSource.register(DefaultSource)
