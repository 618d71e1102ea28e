"""safebunny, exactly-once RabbitMQ sagas on Spark Structured Streaming.

The core library (ids, options, AMQP client, topology, journal, inbox, saga) works
without Spark; the Spark data source lives in the ``pyspark_safebunny`` plugin module,
which Spark finds by itself once the package is installed.
"""

from __future__ import annotations

import sys as _sys
import typing as _typing

from safebunny import _lazy
from safebunny import logs as _logs
from safebunny.errors import (
    SafeBunnyBrokerError,
    SafeBunnyDataLossError,
    SafeBunnyError,
    SafeBunnyOptionError,
    SafeBunnyPublishError,
)
from safebunny.saga.define import topology

# imported on first use (see safebunny._lazy): a process that needs one module does not load them all
_LAZY = {
    "BatchReport": "safebunny.exactly_once", "Inbox": "safebunny.exactly_once", "Outcome": "safebunny.exactly_once",
    "Step": "safebunny.exactly_once", "StepSettings": "safebunny.exactly_once", "StepContext": "safebunny.exactly_once",
    "append": "safebunny.exactly_once",
    "emit": "safebunny.exactly_once", "merge": "safebunny.exactly_once",
    "correlation_id_for": "safebunny.ids", "message_id": "safebunny.ids", "new_correlation_id": "safebunny.ids",
    "saga_start": "safebunny.ids",
    "Retry": "safebunny.saga", "Saga": "safebunny.saga", "SagaSettings": "safebunny.saga",
    "StepStatus": "safebunny.saga",
    "TraceEntry": "safebunny.saga",
    "ConnectionSettings": "safebunny.options.connection", "PublishOptions": "safebunny.options.sink",
    "activate": "safebunny.spark.session", "publish": "safebunny.spark.session",
    "read_stream": "safebunny.spark.session",
    "error_of": "safebunny.spark.exceptions",
}
#: public names of earlier releases that went, and what to write instead (CHANGELOG.md)
_GONE = {"FORMAT": 'the format name is the string "safebunny": write format("safebunny").',
         "SafeBunnyInboxConflictError": "it was never raised; catch safebunny.SafeBunnyError."}
__getattr__, __dir__ = _lazy.exports(__name__, _LAZY, _GONE)
_lazy.refuse_moved()  # an old module path (before a move) raises SafeBunnyMovedError naming the new one

if _typing.TYPE_CHECKING:  # what the names are, for type checkers and editors
    from typing import Any

    from safebunny.exactly_once import BatchReport, Inbox, Outcome, Step, StepContext, StepSettings, append, emit, merge
    from safebunny.ids import correlation_id_for, message_id, new_correlation_id, saga_start
    from safebunny.options.connection import ConnectionSettings
    from safebunny.options.sink import PublishOptions
    from safebunny.saga import Retry, Saga, SagaSettings, StepStatus, TraceEntry
    from safebunny.spark.exceptions import error_of
    from safebunny.spark.session import activate, publish, read_stream

__all__ = [
    "__version__",
    "register",
    "hide_uri_in_plans",
    "message_id",
    "correlation_id_for",
    "new_correlation_id",
    "saga_start",
    "Step",
    "StepSettings",
    "ConnectionSettings",
    "PublishOptions",
    "StepContext",
    "BatchReport",
    "Outcome",
    "append",
    "merge",
    "emit",
    "Inbox",
    "activate",
    "publish",
    "read_stream",
    "Saga",
    "SagaSettings",
    "Retry",
    "StepStatus",
    "TraceEntry",
    "topology",
    "SafeBunnyError",
    "error_of",
    "SafeBunnyOptionError",
    "SafeBunnyBrokerError",
    "SafeBunnyPublishError",
    "SafeBunnyDataLossError",
]

__version__ = "0.1.0"
_logs.install()
# `import safebunny.topology` works too (the saga's topology, safebunny.saga.define.topology)
_sys.modules.setdefault("safebunny.topology", topology)


def register(spark: Any) -> None:
    """Register the ``safebunny`` data source with ``spark`` explicitly.

    Installing the package is enough for sessions started after the install; call this in
    a session whose JVM looked up data sources before the install (a notebook that was
    already running when the package was attached). Raises
    :class:`~safebunny.errors.SafeBunnySparkVersionError` on a PySpark older than 4.2.
    """
    from safebunny.spark.version import require_supported

    require_supported()  # before the plugin imports PySpark's data source API
    from pyspark_safebunny import DefaultSource
    from safebunny.spark import first_stream

    spark.dataSource.register(DefaultSource)
    first_stream.new_map()  # the registered source's map grows at its first stream start
    hide_uri_in_plans(spark)


def hide_uri_in_plans(spark: Any) -> None:
    """Make ``spark`` redact the ``uri`` option in query plans too, by adding it to
    ``spark.sql.redaction.options.regex`` (docs/source.md, "Passwords")."""
    key = "spark.sql.redaction.options.regex"
    current = spark.conf.get(key, "(?i)url")
    if "uri" not in current:
        spark.conf.set(key, f"{current}|(?i)uri")
