"""The modules that need a SparkSession, the JVM or PySpark itself, in one room (sessions and threads, the SQL
shim, session settings, Spark's exceptions and log lines, the supported versions, a driver's first stream); the
library's top-level modules import nothing from Spark."""

__all__: list[str] = []
