"""The Spark plugin of safebunny.

Spark looks up Python data sources in installed top-level modules whose names start with
``pyspark_`` and that expose a ``DefaultSource`` class; this is that module, so
``spark.readStream.format("safebunny")`` works with no register call.
"""

from pyspark_safebunny.data_source import SafeBunnyDataSource

__all__ = ["DefaultSource", "SafeBunnyDataSource"]

DefaultSource = SafeBunnyDataSource
