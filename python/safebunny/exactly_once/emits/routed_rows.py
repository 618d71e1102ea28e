"""Turning a step's emits into publishable rows (bodies, derived ids, correlation and causation ids).

Pure (pyarrow in, pyarrow out), so the id rule is tested without Spark or a broker. An output's id is
``message_id(cause, node, type, index)``, its index the ``outputIndex`` column or else the rank of the
output's body among the cause's outputs of that type, never arrival order (docs/exactly-once.md).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping
from typing import Any

import orjson
import pyarrow as pa

from safebunny.errors import SafeBunnyOptionError
from safebunny.exactly_once.outcome import Emit
from safebunny.ids import message_ids

__all__ = ["PUBLISH_SCHEMA", "Router", "batch_publish_rows", "build_publish_rows"]

#: Columns that are not part of a JSON body.
RESERVED = frozenset({"messageId", "outputIndex", "value"})

PUBLISH_SCHEMA = pa.schema([
    ("value", pa.binary()),
    ("messageId", pa.string()),
    ("correlationId", pa.string()),
    ("causationId", pa.string()),
    ("type", pa.string()),
    ("exchange", pa.string()),
    ("routingKey", pa.string()),
    ("contentType", pa.string()),
])
#: (emit) -> (exchange, routing key) for an emit without one of its own; a saga routes by node and type.
Router = Callable[[Emit], "tuple[str, str | Callable[[str], str]]"]


def build_publish_rows(table: pa.Table, *, node: str, message_type: str, exchange: str,
                       routing_key: str | Callable[[str], str], correlation_of: Mapping[str, str | None],
                       what: str) -> tuple[pa.Table, dict[str, list[str]]]:
    """Rows for the sink, and the ids emitted per cause.

    ``correlation_of`` maps each cause (input message id) to its correlation id; ``routing_key`` is one
    key, or a function of an output's correlation id (a saga routes each instance to its bucket); ``what``
    names the emit in errors. Built column by column: it runs for every emitted message of a batch.
    """
    if "messageId" not in table.column_names:
        raise SafeBunnyOptionError(
            f"{what} has no 'messageId' column (columns: {table.column_names}). Keep the input message's "
            "messageId in every emitted row: it is the cause the output's id is derived from.", "messageId")
    causes = table.column("messageId").to_pylist()
    if None in causes:
        row = table.slice(causes.index(None), 1).to_pylist()[0]
        raise SafeBunnyOptionError(f"{what} has a row with a null 'messageId': {row!r}. Every output needs "
                                   "its cause.", "messageId")
    given = table.column("outputIndex").to_pylist() if "outputIndex" in table.column_names else [None] * len(causes)
    bodies, types = _bodies(table)
    if len(set(causes)) == len(causes):  # one output per cause (the usual case): index as given, else 0
        order = range(len(causes))
        indexes = [0 if index is None else index for index in given]
    else:
        order, indexes = _ranked(causes, given, bodies, what)
    ordered_causes = [causes[i] for i in order]
    ids = message_ids(zip(ordered_causes, indexes, strict=True), node, message_type)
    emitted: dict[str, list[str]] = {}
    for cause, mid in zip(ordered_causes, ids, strict=True):
        emitted.setdefault(cause, []).append(mid)
    correlations = [correlation_of.get(cause) or cause for cause in ordered_causes]
    if callable(routing_key):
        keys: dict[str, str] = {}
        routing = [keys[c] if c in keys else keys.setdefault(c, routing_key(c)) for c in correlations]
    else:
        routing = [routing_key] * len(ids)
    n = len(ids)
    return pa.Table.from_pydict({
        "value": [bodies[i] for i in order], "messageId": ids, "correlationId": correlations,
        "causationId": ordered_causes, "type": [message_type] * n, "exchange": [exchange] * n,
        "routingKey": routing, "contentType": [types[i] for i in order]}, schema=PUBLISH_SCHEMA), emitted


def _bodies(table: pa.Table) -> tuple[list[bytes], list[str]]:
    """Each row's (body, content type): the ``value`` column as is, else the other columns as a JSON object (read
    only when a row has no ``value``)."""
    values = table.column("value").to_pylist() if "value" in table.column_names else [None] * table.num_rows
    fields = [name for name in table.column_names if name not in RESERVED]
    records = table.select(fields).to_pylist() if fields and None in values else [{}] * table.num_rows
    bodies, types = [], []
    for value, record in zip(values, records, strict=True):
        if value is None:
            bodies.append(orjson.dumps(record, default=str, option=orjson.OPT_SORT_KEYS))
            types.append("application/json")
        else:
            bodies.append(value.encode("utf-8") if isinstance(value, str) else bytes(value))
            types.append("text/plain; charset=utf-8" if isinstance(value, str) else "application/octet-stream")
    return bodies, types


def _ranked(causes: list[str], given: list[int | None], bodies: list[bytes],
            what: str) -> tuple[list[int], list[int]]:
    """Rows grouped by cause (in order of first appearance) and each output's index: the one given, else its
    body's rank among the cause's outputs; every output of a cause gives one, or none does."""
    per_cause: dict[str, list[int]] = defaultdict(list)
    for row, cause in enumerate(causes):
        per_cause[cause].append(row)
    order: list[int] = []
    indexes: list[int] = []
    for cause, rows in per_cause.items():
        explicit = [row for row in rows if given[row] is not None]
        if explicit and len(explicit) != len(rows):
            raise SafeBunnyOptionError(f"{what}: some outputs of cause {cause} have an outputIndex and some do not; "
                                       "give every row one, or none.", "outputIndex")
        ranked = sorted(rows, key=lambda row: (given[row] or 0, bodies[row]))
        chosen = [given[row] if given[row] is not None else rank for rank, row in enumerate(ranked)]
        if len(set(chosen)) != len(chosen):
            raise SafeBunnyOptionError(f"{what}: two outputs of cause {cause} share an outputIndex.", "outputIndex")
        order.extend(ranked)
        indexes.extend(chosen)
    return order, indexes


def batch_publish_rows(emits: Mapping[tuple, tuple[Emit, pa.Table]], *, node: str, router: Router | None,
                       correlation_of: Mapping[str, str | None]) -> tuple[pa.Table, dict[str, list[str]]]:
    """A batch's settled emits as one table of rows for the sink, and the ids emitted per cause."""
    tables = []
    emitted: dict[str, list[str]] = defaultdict(list)
    for index, key in enumerate(sorted(emits, key=repr)):
        item, table = emits[key]
        exchange, routing_key = _route(item, node, router)
        rows, ids = build_publish_rows(table, node=node, message_type=item.type, exchange=exchange,
                                       routing_key=routing_key, correlation_of=correlation_of,
                                       what=f"emit #{index} (type {item.type!r})")
        tables.append(rows)
        for cause, cause_ids in ids.items():
            emitted[cause].extend(cause_ids)
    return (pa.concat_tables(tables) if tables else PUBLISH_SCHEMA.empty_table()), emitted


def _route(item: Emit, node: str, router: Router | None) -> tuple[str, Any]:
    if item.routing_key is not None:
        return item.exchange or "", item.routing_key
    if router is not None:
        return router(item)
    raise SafeBunnyOptionError(
        f"emit(type={item.type!r}) has no routing_key, and step {node!r} has no router. Give "
        "emit(..., exchange=..., routing_key=...), or run the step inside a safebunny.Saga.", "routing_key")
