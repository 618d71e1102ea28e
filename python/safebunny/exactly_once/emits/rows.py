"""Emits to publishable rows: bodies, derived ids, correlation and causation ids.

Pure (pyarrow in, pyarrow out), so the id rule is tested without Spark or a broker. An output's id
is ``message_id(cause, node, type, index)``; the index comes from the data, never from arrival
order: the ``outputIndex`` column when the handler gives one, else the rank of the output's body
among the cause's outputs of that type (identical outputs are interchangeable, so any order of
them gives the same set of ids).
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

__all__ = ["PUBLISH_SCHEMA", "RESERVED", "Router", "batch_publish_rows", "build_publish_rows", "body_of"]

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


def body_of(row: Mapping[str, Any]) -> tuple[bytes, str]:
    """(body, content type): the ``value`` column as is, else the other columns as a JSON object."""
    if "value" in row and row["value"] is not None:
        value = row["value"]
        if isinstance(value, str):
            return value.encode("utf-8"), "text/plain; charset=utf-8"
        return bytes(value), "application/octet-stream"
    fields = {k: v for k, v in row.items() if k not in RESERVED}
    return orjson.dumps(fields, default=str, option=orjson.OPT_SORT_KEYS), "application/json"


def build_publish_rows(table: pa.Table, *, node: str, message_type: str, exchange: str,
                       routing_key: str | Callable[[str], str], correlation_of: Mapping[str, str | None],
                       what: str) -> tuple[pa.Table, dict[str, list[str]]]:
    """Rows for the sink, and the ids emitted per cause.

    ``correlation_of`` maps each cause (input message id) to its correlation id; ``routing_key`` is one
    key, or a function of an output's correlation id (a saga routes each instance to its bucket); ``what``
    names the emit in errors.
    """
    if "messageId" not in table.column_names:
        raise SafeBunnyOptionError(
            f"{what} has no 'messageId' column (columns: {table.column_names}). Keep the input message's "
            "messageId in every emitted row: it is the cause the output's id is derived from.", "messageId")
    rows = table.to_pylist()
    per_cause: dict[str, list[tuple[int | None, bytes, str]]] = defaultdict(list)
    for row in rows:
        cause = row["messageId"]
        if cause is None:
            raise SafeBunnyOptionError(f"{what} has a row with a null 'messageId': {row!r}. Every output needs "
                                       "its cause.", "messageId")
        body, content_type = body_of(row)
        per_cause[cause].append((row.get("outputIndex"), body, content_type))
    ordered: list[tuple[str, int, bytes, str]] = []  # (cause, index, body, content type) in publishing order
    for cause, outputs in per_cause.items():
        explicit = [o for o in outputs if o[0] is not None]
        if explicit and len(explicit) != len(outputs):
            raise SafeBunnyOptionError(f"{what}: some outputs of cause {cause} have an outputIndex and some do not; "
                                       "give every row one, or none.", "outputIndex")
        ranked = sorted(outputs, key=lambda o: (o[0] if o[0] is not None else 0, o[1]))
        indexes = [index if index is not None else rank for rank, (index, _b, _c) in enumerate(ranked)]
        if len(set(indexes)) != len(indexes):
            raise SafeBunnyOptionError(f"{what}: two outputs of cause {cause} share an outputIndex.", "outputIndex")
        ordered.extend((cause, i, body, ctype) for i, (_x, body, ctype) in zip(indexes, ranked, strict=True))
    ids = message_ids(((cause, index) for cause, index, _b, _c in ordered), node, message_type)
    out: dict[str, list[Any]] = {name: [] for name in PUBLISH_SCHEMA.names}
    emitted: dict[str, list[str]] = {}
    keys: dict[str, str] = {}
    for (cause, _index, body, content_type), mid in zip(ordered, ids, strict=True):
        emitted.setdefault(cause, []).append(mid)
        correlation = correlation_of.get(cause) or cause
        if callable(routing_key):
            key = keys.get(correlation)
            if key is None:
                key = keys[correlation] = routing_key(correlation)
        else:
            key = routing_key
        for name, value in (("value", body), ("messageId", mid), ("correlationId", correlation),
                            ("causationId", cause), ("type", message_type), ("exchange", exchange),
                            ("routingKey", key), ("contentType", content_type)):
            out[name].append(value)
    return pa.table(out, schema=PUBLISH_SCHEMA), emitted


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
