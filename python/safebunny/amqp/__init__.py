"""AMQP 0-9-1 client pieces, usable without Spark.

The modules: docs/design.md ("Layout" and "Module map").
"""

__all__: list[str] = []
