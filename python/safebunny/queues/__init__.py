"""The classic and quorum queue source without Spark: what ``pyspark_safebunny.queue_reader`` drives.

The modules: docs/design.md ("Layout" and "Module map"). The pause control file is :mod:`safebunny.storage.pause`.
"""

__all__: list[str] = []
