"""A DataFrame step's bodies parsed on the driver from the batch's Arrow rows, before any Spark job.

A saga step's handler gets the body's fields as columns. Parsing them with Spark (``from_json``, then
collecting the rows that did not parse) costs two Spark jobs and a few hundred JVM calls per batch,
which is most of a small batch's time. When the step's schema is strict and made of JSON's own types
(string, integers, floating point, boolean, and arrays and structs of those), the driver parses the
bodies with ``orjson`` instead, checks them with :func:`~safebunny.saga.body_schema.mismatch` (the
same rule as the Spark path) and hands the step a :class:`~safebunny.exactly_once.Prepared` input.

Anything else takes the Spark path (:func:`prepare_bodies` returns ``None``): ``strict_schema=False``
(Spark's coercing reader is the documented behaviour), dates, timestamps, decimals, binary and maps
(Spark's parsers decide what those accept), and any batch holding a body that is not a JSON object
to ``orjson`` (Spark's reader accepts a few things ``orjson`` does not, such as ``NaN``).
"""

from __future__ import annotations

from typing import Any

import orjson
import pyarrow as pa

from safebunny.exactly_once import FailedRow, Prepared
from safebunny.saga.body_schema import mismatch

__all__ = ["prepare_bodies", "parsed_on_driver"]

_MALFORMED = "MalformedMessage"


def parsed_on_driver(dtype: Any) -> bool:
    """Whether bodies of this type are parsed on the driver (JSON's own types only)."""
    from pyspark.sql import types as T

    if isinstance(dtype, T.StructType):
        return all(parsed_on_driver(f.dataType) for f in dtype.fields)
    if isinstance(dtype, T.ArrayType):
        return parsed_on_driver(dtype.elementType)
    return isinstance(dtype, (T.StringType, T.ByteType, T.ShortType, T.IntegerType, T.LongType, T.FloatType,
                              T.DoubleType, T.BooleanType))


def _nullable(dtype: Any) -> Any:
    """``dtype`` with every level nullable, as Spark's JSON reader types its output."""
    from pyspark.sql import types as T

    if isinstance(dtype, T.StructType):
        return T.StructType([T.StructField(f.name, _nullable(f.dataType), True) for f in dtype.fields])
    if isinstance(dtype, T.ArrayType):
        return T.ArrayType(_nullable(dtype.elementType), True)
    return dtype


def prepare_bodies(step: Any, table: pa.Table, schema: Any) -> Prepared | None:
    """The step's input: the batch's columns (``schema``) with the body's fields as columns (a field
    named like a source column replaces it), and the bodies that do not match the step's schema
    rejected as ``MalformedMessage``; ``None`` when this batch or schema takes the Spark path."""
    from pyspark.sql.pandas.types import to_arrow_type
    from pyspark.sql.types import StructType

    struct = step.struct
    if not step.strict_schema or schema is None or not parsed_on_driver(struct) or "value" not in table.column_names:
        return None
    ids = table.column("messageId").to_pylist()
    correlations = (table.column("correlationId").to_pylist() if "correlationId" in table.column_names
                    else [None] * table.num_rows)
    bodies: list[dict[str, Any]] = []
    rejected: dict[str, FailedRow] = {}
    for mid, correlation, raw in zip(ids, correlations, table.column("value").to_pylist(), strict=True):
        try:
            fields = orjson.loads(raw) if raw else None
        except orjson.JSONDecodeError:
            return None
        if not isinstance(fields, dict):
            return None
        problem = mismatch(fields, struct)
        if problem:
            rejected[mid] = FailedRow(mid, f"the body does not match the schema '{step.schema}': {problem}", 1,
                                      correlation, _MALFORMED)
            fields = {}
        bodies.append(fields)
    names = set(struct.fieldNames())
    keep = [f for f in schema.fields if f.name not in names]
    body_fields = _nullable(struct).fields
    columns = [table.column(f.name) for f in keep]
    columns += [pa.array([b.get(f.name) for b in bodies], type=to_arrow_type(f.dataType)) for f in body_fields]
    out_schema = StructType([*keep, *body_fields])
    return Prepared(pa.Table.from_arrays(columns, names=out_schema.fieldNames()), out_schema, rejected)
