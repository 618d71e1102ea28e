"""The storage layer, where safebunny's own state goes, on any filesystem pyarrow opens (a local path,
``file://``, ``s3://``, ``gs://``, ``abfs://``, ``hdfs://``).

It depends on nothing else in safebunny but :mod:`safebunny.errors`. The modules: docs/design.md ("Layout").
"""

__all__ = ["lease"]
