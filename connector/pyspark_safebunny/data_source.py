"""``SafeBunnyDataSource``: the entry point Spark instantiates for ``format("safebunny")``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSource

from safebunny.errors import SafeBunnyNotImplementedError

if TYPE_CHECKING:
    from pyspark.sql.datasource import (
        DataSourceReader,
        DataSourceStreamReader,
        DataSourceStreamWriter,
        DataSourceWriter,
    )
    from pyspark.sql.types import StructType

__all__ = ["SafeBunnyDataSource"]


class SafeBunnyDataSource(DataSource):
    """RabbitMQ as a Spark data source: read queues, publish with confirms."""

    @classmethod
    def name(cls) -> str:
        return "safebunny"

    def schema(self) -> StructType:
        raise SafeBunnyNotImplementedError(
            "The safebunny source is not implemented yet (issue 3); the format is registered."
        )

    def reader(self, schema: StructType) -> DataSourceReader:
        raise SafeBunnyNotImplementedError("Batch reads with safebunny are not implemented yet.")

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        raise SafeBunnyNotImplementedError("Streaming reads with safebunny are not implemented yet.")

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        raise SafeBunnyNotImplementedError("Batch writes with safebunny are not implemented yet.")

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        raise SafeBunnyNotImplementedError("Streaming writes with safebunny are not implemented yet.")
