"""Types for a row handler's outputs, decided for the whole batch, so one message's values never
fail the batch (pure pyarrow, tested without Spark).

An effect's column types come from its target table when it exists (``schema_of``), else from all the
batch's rows, widened; a message whose rows still do not fit fails alone (:data:`ROW_TYPE_ERROR`, retried,
then parked) and the rest of the batch is applied (docs/exactly-once.md, "Row handlers and column types").
Emits become JSON bodies, so their rows are never failed for types: rows that cannot share a table are kept
in one table per message.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pyarrow as pa

from safebunny.exactly_once.collect.materialize import Materialized
from safebunny.exactly_once.outcome import Effect, Emit, FailedRow

__all__ = ["ROW_TYPE_ERROR", "infer_schema", "type_decisions", "build_tables"]

#: The error type of a message whose output rows do not fit the types of the batch or the table.
ROW_TYPE_ERROR = "RowTypeError"
SchemaOf = Callable[[str], "pa.Schema | None"]
Rows = dict[tuple, tuple[Effect, list[dict[str, Any]]]]  # effect target -> its effect and rows


def infer_schema(rows: list[dict[str, Any]]) -> pa.Schema:
    """One schema for ``rows``: widened where types meet, first seen where they cannot, null -> string."""
    try:
        schema = pa.Table.from_pylist(rows).schema
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        types: dict[str, pa.DataType] = {}
        for row in rows:
            for name, value in row.items():
                found = _type_of(value)
                types[name] = found if name not in types else _widen(types[name], found)
        schema = pa.schema(list(types.items()))
    return pa.schema([pa.field(f.name, pa.string()) if pa.types.is_null(f.type) else f for f in schema])


def _type_of(value: Any) -> pa.DataType:
    try:
        return pa.array([value]).type
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return pa.null()


def _widen(current: pa.DataType, other: pa.DataType) -> pa.DataType:
    if pa.types.is_null(current):
        return other
    try:
        merged = pa.unify_schemas([pa.schema([("c", current)]), pa.schema([("c", other)])],
                                  promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return current  # cannot meet: the first in source order decides, the other rows fail alone
    return merged.field("c").type


def _misfit(rows: list[dict[str, Any]], schema: pa.Schema, table: str, from_table: bool) -> str | None:
    """Why ``rows`` do not fit ``schema`` (naming the column, the value and the type), or None."""
    for row in rows:
        for name, value in row.items():
            if schema.get_field_index(name) < 0:
                return (f"the effect row for {table!r} has a column {name!r} that the table does not have "
                        f"(columns: {schema.names}); add the column to the table, or leave it out")
            field_type = schema.field(name).type
            try:
                pa.array([value], type=field_type)
                # pyarrow truncates 1.5 into an integer column: a changed value, not a fit
                fits = not (pa.types.is_integer(field_type) and isinstance(value, float) and not value.is_integer())
            except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
                fits = False
            if not fits:
                source = "the table's type" if from_table else "the type the batch's other rows gave it"
                return (f"the effect row for {table!r} has {name}={value!r} ({type(value).__name__}), which does not "
                        f"fit {field_type} ({source}); give a value of that type")
    return None


def _schemas(decisions: Mapping[str, dict[str, Any]],
             schema_of: SchemaOf) -> tuple[Rows, dict[tuple, tuple[pa.Schema, bool]]]:
    """The successful decisions' effect rows per target, and each target's schema (and whether the table gave it)."""
    rows: Rows = {}
    for decision in decisions.values():
        if decision["ok"]:
            for e in decision["effects"]:
                effect = _effect(e)
                rows.setdefault(effect.key, (effect, []))[1].extend(e["rows"])
    out = {}
    for key, (_, key_rows) in rows.items():
        target = schema_of(key[1])
        out[key] = (target, True) if target is not None else (infer_schema(key_rows), False)
    return rows, out


def type_decisions(decisions: Mapping[str, dict[str, Any]], schema_of: SchemaOf) -> dict[str, dict[str, Any]]:
    """``decisions`` (message id -> row decision, in source order) with each message whose effect rows do
    not fit the batch's types turned into a failed decision that says why."""
    rows, schemas = _schemas(decisions, schema_of)
    fitting = _fitting(rows, schemas)
    out = dict(decisions)
    for mid, decision in decisions.items():
        if not decision["ok"]:
            continue
        for e in decision["effects"]:
            key = _effect(e).key
            if key in fitting:
                continue
            schema, from_table = schemas[key]
            reason = _misfit(e["rows"], schema, e["table"], from_table)
            if reason is not None:
                out[mid] = {"ok": False, "reason": reason, "error_type": ROW_TYPE_ERROR, "attempts": 1}
                break
    return out


def _fitting(rows: Rows, schemas: Mapping[tuple, tuple[pa.Schema, bool]]) -> set[tuple]:
    """The effect targets whose rows all fit at once (the usual case: no check value by value)."""
    out = set()
    for key, (_, key_rows) in rows.items():
        schema = schemas[key][0]
        names = set(schema.names)
        if any(not names.issuperset(row) for row in key_rows):
            continue
        try:
            table = pa.Table.from_pylist(key_rows, schema=schema)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
            continue
        if not any(pa.types.is_integer(f.type) and any(isinstance(r.get(f.name), float) for r in key_rows)
                   for f in table.schema):
            out.add(key)
    return out


def build_tables(decisions: Mapping[str, dict[str, Any]], schema_of: SchemaOf,
                 correlation_of: Mapping[str, str | None] | None = None) -> Materialized:
    """The tables of :func:`type_decisions`' output: one per effect target typed for the batch, emits
    in one table per type (or one per message where their values' types cannot share one); each failed
    message with its correlation id from ``correlation_of`` (message id -> correlation id)."""
    out = Materialized()
    effects, schemas = _schemas(decisions, schema_of)
    emits: dict[tuple, tuple[Emit, list[tuple[str, list[dict[str, Any]]]]]] = {}
    for mid, decision in decisions.items():
        if not decision["ok"]:
            out.failed[mid] = FailedRow(mid, decision["reason"], decision.get("attempts", 1),
                                        (correlation_of or {}).get(mid), decision.get("error_type"))
            continue
        for m in decision["emits"]:
            item = Emit(None, m["type"], m["exchange"], m["routing_key"])
            emits.setdefault(item.key, (item, []))[1].append((mid, m["rows"]))
    for key, (effect, rows) in effects.items():
        out.effects[key] = (effect, pa.Table.from_pylist(rows, schema=schemas[key][0]))
    for key, (item, per_message) in emits.items():
        try:
            out.emits[key] = (item, pa.Table.from_pylist([row for _, rows in per_message for row in rows]))
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            for mid, rows in per_message:  # a body is JSON: each message keeps its own types
                out.emits[(*key, mid)] = (item, pa.Table.from_pylist(rows))
    return out


def _effect(e: Mapping[str, Any]) -> Effect:
    return Effect(e["kind"], None, e["table"], tuple(e["on"]))
