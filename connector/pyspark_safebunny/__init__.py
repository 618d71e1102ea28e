"""The Spark plugin of safebunny.

Spark looks up Python data sources in installed top-level modules whose names start with
``pyspark_`` and that expose a ``DefaultSource`` class; this is that module, so
``spark.readStream.format("safebunny")`` works with no register call. :class:`SafeBunnyDataSource`, the entry
point Spark instantiates for ``format("safebunny")``, only dispatches: the source lives in ``microbatch_reader`` (batch
reads of stream queues in ``stream_queue_reader``; schema in ``schema``), the sink in ``writer``. Imports are lazy
so that each Spark role loads only what it runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource

from safebunny.spark.version import require_supported

if TYPE_CHECKING:
    from pyspark.sql.datasource import (
        DataSourceReader,
        DataSourceStreamReader,
        DataSourceStreamWriter,
        DataSourceWriter,
    )
    from pyspark.sql.types import StructType

__all__ = ["DefaultSource", "SafeBunnyDataSource"]


class SafeBunnyDataSource(DataSource):
    """RabbitMQ as a Spark data source: read queues (ack on commit), publish with confirms."""

    def __init__(self, options: dict[str, Any]) -> None:
        # once per process, in the Python that Spark builds the source in: an older PySpark fails here with a
        # clear error (not when Spark's data source lookup imports this module, which every format shares)
        require_supported()
        super().__init__(options)

    @classmethod
    def name(cls) -> str:
        return "safebunny"

    def schema(self) -> StructType:
        from pyspark_safebunny.schema import source_schema

        return source_schema(self.options)

    def reader(self, schema: StructType) -> DataSourceReader:
        from pyspark_safebunny.stream_queue_reader import create_batch_reader

        return create_batch_reader(self.options, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from pyspark_safebunny.microbatch_reader import create_microbatch_reader

        return create_microbatch_reader(self.options, schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from pyspark_safebunny.writer import create_writer

        return create_writer(self.options, schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from pyspark_safebunny.writer import create_stream_writer

        return create_stream_writer(self.options, schema, overwrite)


DefaultSource = SafeBunnyDataSource
