"""Collecting a handler's small output DataFrames without a Spark job.

A step hands its handler a DataFrame made from the batch's Arrow rows; when the batch is small, Spark
keeps it as a local relation, and its optimizer folds the projections and filters a handler applies
(``ConvertToLocalRelation``) into a new local relation. ``toArrow`` still runs a Spark job for it (tens
of milliseconds each, most of a small batch's time), while ``collect`` reads a local relation on the
driver with no job. :func:`collect_local` takes that road when the optimized plan is a local relation
and every column's type converts to Arrow exactly from Python values; anything else (joins,
aggregates, Python UDFs, timestamps, maps) returns ``None`` and the caller uses ``toArrow``.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

__all__ = ["collect_local", "LOCAL_ROWS"]

#: Up to this many input rows, a handler's outputs are tried as local relations (Python rows convert
#: slower than Arrow batches, so a large batch is collected with ``toArrow``).
LOCAL_ROWS = 2000


def _exact(dtype: Any) -> bool:
    """Types whose Python values (from ``collect``) convert to Arrow exactly as ``toArrow`` gives them."""
    from pyspark.sql import types as T

    if isinstance(dtype, T.StructType):
        names = dtype.fieldNames()
        return len(set(names)) == len(names) and all(_exact(f.dataType) for f in dtype.fields)
    if isinstance(dtype, T.ArrayType):
        return _exact(dtype.elementType)
    return isinstance(dtype, (T.StringType, T.ByteType, T.ShortType, T.IntegerType, T.LongType, T.FloatType,
                              T.DoubleType, T.BooleanType, T.DateType, T.DecimalType, T.BinaryType))


def _plain(value: Any) -> Any:
    """A collected value with its Rows as dicts (what pyarrow converts to a struct)."""
    if hasattr(value, "asDict"):
        return {k: _plain(v) for k, v in value.asDict(recursive=False).items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, bytearray):
        return bytes(value)
    return value


def collect_local(frame: Any) -> pa.Table | None:
    """``frame``'s rows as Arrow, read on the driver when its optimized plan is a local relation and its
    types convert exactly; ``None`` otherwise (the caller runs ``toArrow``). Only for Spark classic:
    over Spark Connect the plan is not reachable."""
    jdf = getattr(frame, "_jdf", None)
    if jdf is None or not _exact(frame.schema):
        return None
    try:
        if jdf.queryExecution().optimizedPlan().getClass().getSimpleName() != "LocalRelation":
            return None
    except Exception:  # noqa: BLE001 - an unexpected plan API: the toArrow road always works
        return None
    from pyspark.sql.pandas.types import to_arrow_schema

    large = frame.sparkSession.conf.get("spark.sql.execution.arrow.useLargeVarTypes", "false") == "true"
    schema = to_arrow_schema(frame.schema, error_on_duplicated_field_names_in_struct=True, timezone="UTC",
                             prefers_large_types=large)
    rows = frame.collect()
    names = frame.columns
    return pa.Table.from_arrays(
        [pa.array([_plain(row[i]) for row in rows], type=schema.field(i).type) for i in range(len(names))],
        schema=schema)
