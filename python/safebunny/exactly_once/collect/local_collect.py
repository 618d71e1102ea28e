"""Collecting a handler's output DataFrames without a Spark job of their own.

Spark classic only: both roads read the JVM plan; over Spark Connect, or at any surprise from the plan API, a
frame is collected as usual.

Small outputs: a step hands its handler a DataFrame made from the batch's Arrow rows; when the batch is small,
Spark keeps it as a local relation, and its optimizer folds the projections and filters a handler applies
(``ConvertToLocalRelation``) into a new local relation. ``toArrow`` still runs a Spark job for it (tens
of milliseconds each, most of a small batch's time), while ``collect`` reads a local relation on the
driver with no job. :func:`collect_local` takes that road when the optimized plan is a local relation
and every column's type converts to Arrow exactly from Python values; anything else (joins,
aggregates, Python UDFs, timestamps, maps) returns ``None`` and the caller uses ``toArrow``.

Outputs that only select columns of another output: a handler often writes a DataFrame as an effect and emits
some of its columns (``rows`` as the effect, ``rows.select("messageId", "orderId")`` as the emit). Collected
separately, that is two Spark jobs over the same input; :func:`column_selections` recognises the second as a plain
column selection of the first (its analyzed plan a ``Project`` of attributes over a plan with the same result), so
the step collects the first once and takes the columns from its Arrow table.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

__all__ = ["collect_local", "column_selections", "LOCAL_ROWS"]

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


def _selection(frame: Any) -> tuple[Any, list[str]] | None:
    """(the plan ``frame`` selects from, the selected names) when its analyzed plan is a ``Project`` of plain
    attributes; ``None`` otherwise."""
    jdf = getattr(frame, "_jdf", None)
    if jdf is None:
        return None
    try:
        plan = jdf.queryExecution().analyzed()
        if plan.getClass().getSimpleName() != "Project":
            return None
        projected = plan.projectList()
        names = []
        for i in range(projected.size()):
            expression = projected.apply(i)
            if expression.getClass().getSimpleName() != "AttributeReference":
                return None  # an alias, a computed column: not a plain selection
            names.append(expression.name())
        return plan.child(), names
    except Exception:  # noqa: BLE001 - an unexpected plan API: collecting the frame itself always works
        return None


def _selects_from(selection: tuple[Any, list[str]], frame: Any, base: Any) -> bool:
    """Whether ``frame`` (whose ``selection`` it is) is exactly ``base.select(<some of its columns>)``."""
    child, names = selection
    jbase = getattr(base, "_jdf", None)
    if jbase is None or frame is base:
        return False
    base_columns = list(base.columns)
    if len(set(base_columns)) != len(base_columns) or not set(names) <= set(base_columns):
        return False
    try:
        return bool(child.sameResult(jbase.queryExecution().analyzed())) and names == list(frame.columns)
    except Exception:  # noqa: BLE001 - as above
        return False


def column_selections(frames: list[Any]) -> dict[int, tuple[Any, list[str]]]:
    """id(frame) -> (another of ``frames``, the columns it selects of it), for each frame that is a plain column
    selection of another one that is collected itself. Each frame's own plan is read once."""
    if len(frames) < 2:
        return {}
    derived: dict[int, tuple[Any, list[str]]] = {}
    for frame in frames:
        selection = _selection(frame)
        if selection is None:
            continue
        for base in frames:
            if id(base) not in derived and _selects_from(selection, frame, base):
                derived[id(frame)] = (base, selection[1])
                break
    # a base must be collected itself: a frame whose base is derived in turn is collected as usual
    return {key: (base, columns) for key, (base, columns) in derived.items() if id(base) not in derived}
