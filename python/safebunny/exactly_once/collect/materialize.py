"""Turning a DataFrame handler's :class:`Outcome` into Arrow tables, keyed by target, before anything is written.

Materializing first is what lets a failing row be isolated: the handler's Spark jobs all run here,
and nothing has been applied or published yet when one of them fails.

Outputs read without a Spark job of their own (:func:`collect_local`, :func:`column_selections`), Spark classic only:
both roads read the JVM plan; over Spark Connect, or at any surprise from the plan API, a frame is collected as usual.

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

Settling (:func:`settle_outcome`, pure pyarrow, tested without Spark): a failed message's rows are taken out of
every effect and emit table, and a merge keeps one row per key, that of the message last in the source's order
(docs/exactly-once.md, "Bad data: applied once, or parked with a reason").
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from itertools import chain
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from safebunny.delta.merge_rows import last_per_key
from safebunny.errors import SafeBunnyOptionError
from safebunny.exactly_once.outcome import Effect, Emit, FailedRow, Outcome
from safebunny.spark.log_levels import quiet_task_failures

__all__ = ["LOCAL_ROWS", "Materialized", "check_outcome", "collect_local", "column_selections", "from_frames",
           "merge_all", "settle_outcome", "without_messages"]

#: Spark jobs run side by side to collect one outcome's effects and emits.
_PARALLEL_JOBS = 4
#: Up to this many input rows, a handler's outputs are tried as local relations (Python rows convert
#: slower than Arrow batches, so a large batch is collected with ``toArrow``).
LOCAL_ROWS = 2000


@dataclass
class Materialized:
    """Effects and emits as Arrow tables, keyed by their target, plus failed rows by message id."""

    effects: dict[tuple, tuple[Effect, pa.Table]] = field(default_factory=dict)
    emits: dict[tuple, tuple[Emit, pa.Table]] = field(default_factory=dict)
    failed: dict[str, FailedRow] = field(default_factory=dict)


def _describe(item: Effect | Emit, index: int) -> str:
    if isinstance(item, Effect):
        return f"the DataFrame of effect #{index} ({item.kind} into {item.table!r})"
    return f"the DataFrame of emit #{index} (type {item.type!r})"


def from_frames(outcome: Outcome | None, local: bool = False) -> Materialized:
    """Collect every effect and emit DataFrame of ``outcome`` (this runs the handler's jobs); with
    ``local`` (a small input), frames Spark keeps as local relations are read without a job."""
    out = Materialized()
    if not check_outcome(outcome, "step"):
        return out
    items = [*outcome.effects, *outcome.emits]
    for index, item in enumerate(items):
        columns = getattr(item.data, "columns", None)
        if columns is None:
            raise SafeBunnyOptionError(f"{_describe(item, index)} is a {type(item.data).__name__}, not a DataFrame.",
                                       "handler")
        if "messageId" not in columns:
            raise SafeBunnyOptionError(
                f"{_describe(item, index)} has no 'messageId' column (columns: {list(columns)}). Keep the input "
                "message's messageId in every row: it ties each output to its cause.", "messageId")
    if items:
        # a failing row is expected here (the step isolates it and says so once per batch): no task traces
        with quiet_task_failures(items[0].data.sparkSession):
            tables = _collect_all([item.data for item in items], local)
        for item, table in zip(items, tables, strict=True):
            _add(out, item, table)
    out.failed.update((failed.message_id, failed) for failed in outcome.failed)
    return out


def _collect_all(frames: list[Any], local: bool = False) -> list[pa.Table]:
    """Every frame as Arrow: a frame seen twice (one DataFrame as effect and emit) is collected once,
    local relations without a job when ``local``, the rest with ``toArrow``, the Spark jobs side by
    side (each is small; their fixed costs overlap)."""
    unique = {id(frame): frame for frame in frames}
    done = {key: table for key, frame in unique.items() if local and (table := collect_local(frame)) is not None}
    rest = [frame for key, frame in unique.items() if key not in done]
    derived = column_selections(rest)  # frames that select columns of another: read from its rows, no job of their own
    rest = [frame for frame in rest if id(frame) not in derived]
    if len(rest) < 2:
        done.update({id(frame): frame.toArrow() for frame in rest})
    else:
        with ThreadPoolExecutor(max_workers=min(len(rest), _PARALLEL_JOBS),
                                thread_name_prefix="safebunny-outcome") as pool:
            futures = {id(frame): pool.submit(frame.toArrow) for frame in rest}
            done.update({key: future.result() for key, future in futures.items()})
    for key, (base, columns) in derived.items():
        done[key] = done[id(base)].select(columns)
    return [done[id(frame)] for frame in frames]


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


def check_outcome(outcome: Any, kind: str) -> bool:
    """False for ``None`` (nothing to do); raises for anything but an :class:`Outcome`."""
    if outcome is None:
        return False
    if not isinstance(outcome, Outcome):
        raise SafeBunnyOptionError(
            f"A {kind} handler must return safebunny.Outcome (or None); it returned {type(outcome).__name__}.",
            "handler")
    return True


def merge_all(parts: Iterable[Materialized]) -> Materialized:
    out = Materialized()
    for part in parts:
        for key, (item, table) in chain(part.effects.items(), part.emits.items()):
            _add(out, item, table, key)
        out.failed.update(part.failed)
    return out


def _add(out: Materialized, item: Effect | Emit, table: pa.Table, key: tuple | None = None) -> None:
    key = key or item.key
    target = out.effects if isinstance(item, Effect) else out.emits
    if key in target:
        previous_item, previous = target[key]
        target[key] = (previous_item, pa.concat_tables([previous, table], promote_options="permissive"))
    else:
        target[key] = (item, table)


def identified(result: Materialized, identity: Callable[[str], str]) -> Materialized:
    """``result`` with each effect named and keyed by ``identity(table)``, what its table is: two spellings of one
    table are one target (one app id, one lock, one claim entry, one merge source), never two."""
    out = Materialized(emits=dict(result.emits), failed=dict(result.failed))
    for item, table in result.effects.values():
        _add(out, replace(item, table=identity(item.table)), table)
    return out


def settle_outcome(result: Materialized, order: Mapping[str, int],
                   rejected: Mapping[str, FailedRow] | None = None) -> Materialized:
    """``result`` with the ``rejected`` messages failed, every failed message's rows removed, and each
    merge effect reduced to one row per key (last in ``order``, message id -> source position)."""
    failed = {**(rejected or {}), **result.failed}
    out = Materialized(failed=failed)
    for key, (item, table) in result.effects.items():
        table = without_messages(table, failed)
        if item.kind == "merge":
            table = last_per_key(table, item.on, order)
        out.effects[key] = (item, table)
    for key, (item, table) in result.emits.items():
        out.emits[key] = (item, without_messages(table, failed))
    return out


def without_messages(table: pa.Table, message_ids: Collection[str]) -> pa.Table:
    """The rows of ``table`` whose ``messageId`` is not in ``message_ids``."""
    if not message_ids or "messageId" not in table.column_names or table.num_rows == 0:
        return table
    drop = pc.is_in(table.column("messageId"), value_set=pa.array(list(message_ids), pa.string()))
    return table.filter(pc.invert(pc.fill_null(drop, False)))
