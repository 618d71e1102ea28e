"""What the sink publishes for a row (column checks, the message-id rule, AMQP properties).

Pure logic (no broker, no Spark), so that every rule here is unit-tested. The columns
(:data:`ACCEPTED_COLUMNS`) and the id rules (the row's ``messageId``, else from its ``causationId``:
:func:`safebunny.ids.message_id` or :func:`caused_id`, else :func:`content_id`) are documented in
docs/sink.md; the exact encodings are these. The correlation id is the ``correlationId`` column, else the
``causationId``, else the message's own id. The causation id travels in :data:`CAUSATION_HEADER`.
"""

from __future__ import annotations

import difflib
import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from pika import BasicProperties

from safebunny.errors import SafeBunnyOptionError
from safebunny.ids import encode_name, message_id
from safebunny.ids import uuid5 as _uuid5
from safebunny.options.sink import SinkOptions

__all__ = ["ACCEPTED_COLUMNS", "CAUSATION_HEADER", "SinkPlan", "MessageBuilder", "plan_sink", "validate_columns",
           "content_id", "caused_id"]

#: Accepted input columns and their Spark types (``DataType.simpleString()``).
ACCEPTED_COLUMNS: dict[str, tuple[str, ...]] = {
    "value": ("binary", "string"),
    "messageId": ("string",),
    "correlationId": ("string",),
    "causationId": ("string",),
    "outputIndex": ("int", "bigint"),
    "headers": ("map<string,string>",),
    "contentType": ("string",),
    "type": ("string",),
    "exchange": ("string",),
    "routingKey": ("string",),
}
#: The header that carries the causation id.
CAUSATION_HEADER = "x-causation-id"
#: The type slot of derived ids when a row has no type.
DEFAULT_TYPE = "message"
_CONTENT_TAG = "safebunny.content.v1"
_CAUSED_TAG = "safebunny.caused.v1"
#: Derived ids remembered per task to catch a reused outputIndex and to count repeated outputs.
_TRACKED = 100_000
_TEXT = "text/plain; charset=utf-8"
_BINARY = "application/octet-stream"


def _accepted() -> str:
    return ", ".join(f"'{name}' ({' or '.join(kinds)})" for name, kinds in ACCEPTED_COLUMNS.items())


def validate_columns(columns: Mapping[str, str]) -> None:
    """Check the input's columns (name → Spark type string) against :data:`ACCEPTED_COLUMNS`.

    Raises :class:`SafeBunnyOptionError` for an unknown column (listing the accepted ones),
    a column of the wrong type, or a missing ``value``.
    """
    for name, kind in columns.items():
        kinds = ACCEPTED_COLUMNS.get(name)
        if kinds is None:
            close = [c for c in ACCEPTED_COLUMNS if c.lower() == name.lower()] or difflib.get_close_matches(
                name, list(ACCEPTED_COLUMNS), n=1, cutoff=0.6)
            hint = f" Did you mean '{close[0]}'?" if close else ""
            raise SafeBunnyOptionError(
                f"The safebunny sink does not accept the column {name!r}.{hint} Accepted columns: {_accepted()}. "
                "Drop or rename the column before writing.", name)
        if kind not in kinds:
            raise SafeBunnyOptionError(
                f"Column {name!r} must be of type {' or '.join(kinds)}, but it is {kind}. "
                f"Cast it, e.g. col({name!r}).cast({kinds[-1]!r}).", name)
    if "value" not in columns:
        raise SafeBunnyOptionError(
            f"The safebunny sink needs a 'value' column (the message body, binary or string); got columns "
            f"{sorted(columns)}. Accepted columns: {_accepted()}.", "value")


@dataclass(frozen=True)
class SinkPlan:
    """What the sink needs to turn rows into messages: its options and the input's columns."""

    options: SinkOptions
    columns: tuple[str, ...]
    value_is_text: bool


def plan_sink(options: SinkOptions, columns: Mapping[str, str]) -> SinkPlan:
    """Validate the sink options together with the input's columns (name → type string)."""
    validate_columns(columns)
    if options.routing_key is None and "routingKey" not in columns:
        raise SafeBunnyOptionError(
            "The safebunny sink needs a routing key: set the option 'routingKey' (for example "
            "'billing.InvoiceCreated') or add a string 'routingKey' column.", "routingKey")
    return SinkPlan(options, tuple(columns), columns["value"] == "string")


class OutgoingMessage(NamedTuple):
    """One message ready to publish."""

    exchange: str
    routing_key: str
    body: bytes
    message_id: str
    properties: Any  # pika.BasicProperties


def _feed(parts: list[bytes], value: str | bytes | None) -> None:
    if value is None:
        parts.append(b"N")
        return
    data = value.encode("utf-8") if isinstance(value, str) else bytes(value)
    parts.append(b"B%d:" % len(data))
    parts.append(data)


def content_id(scope: str, body: bytes, correlation_id: str | None, headers: list[tuple[str, Any]],
               content_type: str | None, message_type: str | None, exchange: str, routing_key: str,
               occurrence: int) -> str:
    """The content id of rule 3 (docs/sink.md)."""
    return _uuid5(encode_name(
        _CONTENT_TAG, scope,
        _digest(body, correlation_id, headers, content_type, message_type, exchange, routing_key),
        str(occurrence)))


def caused_id(causation_id: str, node: str, message_type: str, body: bytes, correlation_id: str | None,
              headers: list[tuple[str, Any]], content_type: str | None, row_type: str | None, exchange: str,
              routing_key: str) -> str:
    """The id of rule 2b (docs/sink.md): the cause, the slot and the row's content.

    ``message_type`` is the type slot (``DEFAULT_TYPE`` when the row has none); ``row_type`` is
    the row's ``type`` property (None when it has none), which is part of the content.
    """
    return _uuid5(encode_name(
        _CAUSED_TAG, causation_id, node, message_type,
        _digest(body, correlation_id, headers, content_type, row_type, exchange, routing_key)))


def _digest(body: bytes, correlation_id: str | None, headers: list[tuple[str, Any]], content_type: str | None,
            message_type: str | None, exchange: str, routing_key: str) -> str:
    parts: list[bytes] = []
    _feed(parts, body)
    _feed(parts, correlation_id)
    parts.append(b"H%d:" % len(headers))
    for key, value in sorted(headers, key=lambda kv: kv[0]):
        _feed(parts, key)
        _feed(parts, None if value is None else str(value))
    for field in (content_type, message_type, exchange, routing_key):
        _feed(parts, field)
    return hashlib.sha256(b"".join(parts)).hexdigest()


class MessageBuilder:
    """Turns one task's rows into :class:`OutgoingMessage` s, applying the id rule.

    One builder per task (Spark partition): the occurrence counters of rules 2 and 3 live
    here. ``scope`` identifies the task's slot in the query (docs/sink.md).
    """

    def __init__(self, plan: SinkPlan, scope: str) -> None:
        self.plan = plan
        self.scope = scope
        self.rows = 0
        self._contents: dict[str, int] = {}
        self._indexed: dict[str, str] = {}  # rule 2a: message id -> content digest, to catch a reused index
        self.repeated_outputs = 0  # rule 2b: identical outputs of one cause seen in this task (one message)
        self._caused: set[str] = set()

    def build(self, value: bytes | str | None, *, timestamp: int, message_id_: str | None = None,
              correlation_id: str | None = None, causation_id: str | None = None,
              headers: Mapping[str, Any] | Iterable[tuple[str, Any]] | None = None,
              content_type: str | None = None, message_type: str | None = None,
              exchange: str | None = None, routing_key: str | None = None,
              output_index: int | None = None) -> OutgoingMessage:
        """The message for one row; ``timestamp`` is the AMQP timestamp (epoch seconds)."""
        plan, options = self.plan, self.plan.options
        row = self.rows
        self.rows += 1
        if value is None:
            raise SafeBunnyOptionError(
                f"Row {row} of this task has a null 'value'; the safebunny sink publishes every row and "
                "never drops one. Filter out or fill null values before writing.", "value")
        body = value.encode("utf-8") if isinstance(value, str) else bytes(value)
        exchange = options.exchange if exchange is None else exchange
        routing_key = options.routing_key if routing_key is None else routing_key
        if routing_key is None:
            raise SafeBunnyOptionError(
                f"Row {row} of this task has a null 'routingKey' and the option 'routingKey' is not set. "
                "Set the option as a default or fill the column.", "routingKey")
        message_type = options.type if message_type is None else message_type
        if content_type is None:
            content_type = options.content_type or (_TEXT if plan.value_is_text else _BINARY)
        items = [] if headers is None else list(headers.items() if isinstance(headers, Mapping) else headers)
        if message_id_ == "" or causation_id == "":
            name = "messageId" if message_id_ == "" else "causationId"
            raise SafeBunnyOptionError(
                f"Row {row} of this task has an empty {name!r}; use null for 'none' or a real id.", name)

        if output_index is not None and (isinstance(output_index, bool) or output_index < 0):
            raise SafeBunnyOptionError(
                f"Row {row} of this task has outputIndex {output_index!r}; it must be an integer >= 0 (or null).",
                "outputIndex")
        if output_index is not None and causation_id is None and message_id_ is None:
            raise SafeBunnyOptionError(
                f"Row {row} of this task has an outputIndex ({output_index}) but no causationId: the index "
                "numbers a cause's outputs. Fill 'causationId', or drop 'outputIndex'.", "outputIndex")

        if message_id_ is not None:
            mid = message_id_
        elif causation_id is not None:
            node = options.node or routing_key or exchange
            if not node:
                raise SafeBunnyOptionError(
                    f"Row {row} of this task has a causationId but no node for its derived id: the routing "
                    "key and exchange are both empty. Set the option 'node'.", "node")
            slot_type = message_type or DEFAULT_TYPE
            digest = _digest(body, correlation_id, items, content_type, message_type, exchange, routing_key)
            if output_index is not None:
                mid = message_id(causation_id, node, slot_type, int(output_index))
                known = self._indexed.get(mid)
                if known is None and len(self._indexed) < _TRACKED:
                    self._indexed[mid] = digest
                elif known is not None and known != digest:
                    raise SafeBunnyOptionError(
                        f"Row {row} of this task has outputIndex {output_index} for causationId {causation_id!r} "
                        f"(node {node!r}, type {slot_type!r}), like an earlier row with different content: both "
                        "would get the same message id and the next step would keep only one. Give each output "
                        "of a cause its own outputIndex.", "outputIndex")
            else:
                mid = _uuid5(encode_name(_CAUSED_TAG, causation_id, node, slot_type, digest))
                if mid in self._caused:
                    self.repeated_outputs += 1
                elif len(self._caused) < _TRACKED:
                    self._caused.add(mid)
        else:
            digest = _digest(body, correlation_id, items, content_type, message_type, exchange, routing_key)
            occurrence = self._contents.get(digest, 0)
            self._contents[digest] = occurrence + 1
            mid = _uuid5(encode_name(_CONTENT_TAG, self.scope, digest, str(occurrence)))

        header_dict: dict[str, Any] | None = dict(items) if items else None
        if causation_id is not None:
            header_dict = header_dict or {}
            header_dict[CAUSATION_HEADER] = causation_id
        props = BasicProperties(
            content_type=content_type,
            headers=header_dict,
            delivery_mode=2,
            correlation_id=correlation_id if correlation_id is not None else (causation_id or mid),
            message_id=mid,
            timestamp=timestamp,
            type=message_type,
        )
        return OutgoingMessage(exchange, routing_key, body, mid, props)
