"""Message fields -> the source's column values, and Arrow record batches of them.

Shared by every reader (classic/quorum journal reader, stream-queue reader). The columns
and their order are those of ``pyspark_safebunny.schema.schema_for(include_headers,
include_offset=True)``; :func:`arrow_schema` is the exact Arrow schema Spark expects for it
(``to_arrow_schema(schema, timezone="UTC")``: Spark rejects a batch whose schema differs,
nullability included). This module does not import pyspark. Header values are rendered by
:func:`render_header_value` (the rules: docs/source.md, "Columns" of stream queues).
"""

from __future__ import annotations

import base64
import datetime as _dt
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

import orjson
import pyarrow as pa

__all__ = ["arrow_schema", "as_text", "render_header_value", "render_headers", "AmqpColumns", "rows_to_record_batch"]

_BASE_FIELDS: tuple[pa.Field, ...] = (
    pa.field("value", pa.binary()),
    pa.field("messageId", pa.string()),
    pa.field("correlationId", pa.string()),
    pa.field("routingKey", pa.string()),
    pa.field("exchange", pa.string()),
    pa.field("queue", pa.string(), nullable=False),
    pa.field("redelivered", pa.bool_(), nullable=False),
    pa.field("deliveryCount", pa.int32()),
    pa.field("timestamp", pa.timestamp("us", tz="UTC")),
    pa.field("contentType", pa.string()),
    pa.field("type", pa.string()),
)
_HEADERS_FIELD = pa.field("headers", pa.map_(pa.string(), pa.string()))
_OFFSET_FIELD = pa.field("offset", pa.int64())

#: Body bytes per Arrow record batch at most (a single larger body gets a batch of its own). Arrow's
#: ``binary`` type has 32-bit offsets, so one array holds less than 2 GiB; a batch of messages is
#: therefore journaled and served as several record batches, each well under that limit and
#: small enough for Spark's JVM to take in one piece.
MAX_CHUNK_BYTES = 256 * 1024 * 1024


def arrow_schema(include_headers: bool, include_offset: bool = True) -> pa.Schema:
    """The Arrow schema Spark expects for ``schema_for(include_headers, include_offset)``."""
    fields = list(_BASE_FIELDS)
    if include_headers:
        fields.append(_HEADERS_FIELD)
    if include_offset:
        fields.append(_OFFSET_FIELD)
    return pa.schema(fields)


def _bytes_text(value: bytes | bytearray | memoryview) -> str:
    raw = bytes(value)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return base64.b64encode(raw).decode("ascii")


def _json_default(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return _bytes_text(value)
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    raise TypeError(f"cannot render a header value of type {type(value).__name__}")


def _normalise(value: Any) -> Any:
    """Make nested tables JSON-ready: keys as text (orjson's OPT_NAIVE_UTC reads naive datetimes as UTC)."""
    if isinstance(value, Mapping):
        return {(_bytes_text(k) if isinstance(k, (bytes, bytearray)) else str(k)): _normalise(v)
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_normalise(v) for v in value]
    return value


def as_text(value: Any) -> str | None:
    """An AMQP field or header value as text (bytes decoded as UTF-8, bad bytes replaced); None stays None."""
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", errors="replace")
    return str(value)


def render_header_value(value: Any) -> str | None:
    """One header value as text (rules: docs/source.md, the Columns of stream queues)."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return _bytes_text(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, _dt.datetime):
        aware = value if value.tzinfo else value.replace(tzinfo=_dt.timezone.utc)
        return aware.astimezone(_dt.timezone.utc).isoformat()
    try:
        return orjson.dumps(_normalise(value), option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS
                            | orjson.OPT_NAIVE_UTC, default=_json_default).decode("utf-8")
    except (TypeError, orjson.JSONEncodeError):
        return str(value)


def render_headers(headers: Mapping[Any, Any] | None) -> dict[str, str | None] | None:
    """A header table as ``{str: str}`` (values may be None), or None when there are no headers.

    Keys given as bytes (AMQP 1.0 application properties) are decoded like values. The result
    is ordered by key, so the ``headers`` map of a message is the same whichever protocol read it.
    """
    if headers is None:
        return None
    out: dict[str, str | None] = {}
    for key, value in headers.items():
        name = _bytes_text(key) if isinstance(key, (bytes, bytearray, memoryview)) else str(key)
        out[name] = render_header_value(value)
    return dict(sorted(out.items()))


def header_delivery_count(headers: Mapping[str, Any] | None) -> int | None:
    """The quorum queue's ``x-delivery-count`` header, or None."""
    count = headers.get("x-delivery-count") if headers else None
    return count if isinstance(count, int) and not isinstance(count, bool) else None


_UNSET: Any = object()


class AmqpColumns:
    """Column lists of AMQP 0-9-1 deliveries, built one append per message (the readers' hot
    path: attribute reads and list appends, no per-row dict) and turned into one Arrow batch
    of the source's schema by :meth:`to_batch`."""

    _NAMES = ("value", "messageId", "correlationId", "routingKey", "exchange", "redelivered",
              "deliveryCount", "timestamp", "contentType", "type", "offset")

    def __init__(self, include_headers: bool) -> None:
        self.include_headers = include_headers
        self.columns: dict[str, list[Any]] = {name: [] for name in self._NAMES}
        if include_headers:
            self.columns["headers"] = []

    def __len__(self) -> int:
        return len(self.columns["value"])

    def extend(self, bodies: Sequence[bytes], properties: Sequence[Any], exchanges: Sequence[str | None],
               routing_keys: Sequence[str | None], redelivered: Sequence[bool]) -> None:
        """Add many deliveries at once: the same as :meth:`append` for each (with ``headers`` from the
        properties and no offset), column by column rather than row by row (the classic/quorum reader's
        hot path: about twice as fast)."""
        c = self.columns
        n = len(bodies)
        c["value"] += [bytes(b) if type(b) is not bytes else b for b in bodies]
        c["messageId"] += [p.message_id for p in properties]
        c["correlationId"] += [p.correlation_id for p in properties]
        c["routingKey"] += routing_keys
        c["exchange"] += exchanges
        c["redelivered"] += redelivered
        headers = [p.headers for p in properties]
        c["deliveryCount"] += [header_delivery_count(h) if h else None for h in headers]
        c["timestamp"] += [None if t is None else t * 1_000_000 if isinstance(t, int) else t
                           for t in (p.timestamp for p in properties)]
        c["contentType"] += [p.content_type for p in properties]
        c["type"] += [p.type for p in properties]
        c["offset"] += [None] * n
        if self.include_headers:
            c["headers"] += [render_headers(h) if h else None for h in headers]

    def append(self, body: bytes, properties: Any, exchange: str | None, routing_key: str | None,
               redelivered: bool = False, offset: int | None = None, headers: Any = _UNSET) -> None:
        """Add one delivery. ``headers`` defaults to ``properties.headers`` (pass a filtered copy
        to leave broker bookkeeping headers such as ``x-stream-offset`` out)."""
        c = self.columns
        if headers is _UNSET:
            headers = properties.headers
        stamp = properties.timestamp
        c["value"].append(bytes(body))
        c["messageId"].append(properties.message_id)
        c["correlationId"].append(properties.correlation_id)
        c["routingKey"].append(routing_key)
        c["exchange"].append(exchange)
        c["redelivered"].append(redelivered)
        c["deliveryCount"].append(header_delivery_count(headers))
        c["timestamp"].append(stamp * 1_000_000 if isinstance(stamp, int) else stamp)
        c["contentType"].append(properties.content_type)
        c["type"].append(properties.type)
        c["offset"].append(offset)
        if self.include_headers:
            c["headers"].append(render_headers(headers) if headers else None)

    def to_batch(self, queue: str) -> pa.RecordBatch:
        """The Arrow batch (``queue`` filled in) of everything appended so far.

        Raises :class:`pyarrow.ArrowCapacityError` (or ``ArrowInvalid``) when the bodies reach 2 GiB:
        use :meth:`to_batches` for batches of any size."""
        columns = dict(self.columns)
        columns["queue"] = [queue] * len(self)
        return rows_to_record_batch(columns, self.include_headers)

    def to_batches(self, queue: str, max_chunk_bytes: int | None = None) -> list[pa.RecordBatch]:
        """Everything appended so far as record batches of at most ``max_chunk_bytes`` body bytes each
        (default :data:`MAX_CHUNK_BYTES`; a body larger than that gets a batch of its own), in order."""
        limit = MAX_CHUNK_BYTES if max_chunk_bytes is None else max_chunk_bytes
        values = self.columns["value"]
        n = len(values)
        if sum(map(len, values)) <= limit:
            return [self.to_batch(queue)] if n else []
        cuts = [0]
        size = 0
        for i, body in enumerate(values):
            length = len(body)
            if size and size + length > limit:
                cuts.append(i)
                size = 0
            size += length
        cuts.append(n)
        out = []
        for lo, hi in zip(cuts, cuts[1:], strict=False):
            columns: dict[str, list[Any]] = {name: col[lo:hi] for name, col in self.columns.items()}
            columns["queue"] = [queue] * (hi - lo)
            out.append(rows_to_record_batch(columns, self.include_headers))
        return out


def _timestamp_array(values: Sequence[Any]) -> pa.Array:
    """Datetimes (aware or naive UTC) or ints of epoch microseconds -> ``timestamp[us, UTC]``."""
    try:  # the common case, ints and nulls only (AMQP 0-9-1 timestamps), as one cast
        return pa.array(values, type=pa.int64()).cast(pa.timestamp("us", tz="UTC"))
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):  # datetimes: pyarrow converts them (naive ones as UTC)
        return pa.array(values, type=pa.timestamp("us", tz="UTC"))


def _headers_array(values: Sequence[Any]) -> pa.Array:
    return pa.array([None if v is None else [(str(k), None if x is None else str(x)) for k, x in v.items()]
                     for v in values], type=_HEADERS_FIELD.type)


def rows_to_record_batch(columns: Mapping[str, Sequence[Any]], include_headers: bool) -> pa.RecordBatch:
    """An Arrow batch with exactly :func:`arrow_schema` ``(include_headers, include_offset=True)``.

    ``columns`` is a dict of columns (lists of equal length) keyed by column name. Missing columns
    are null (``redelivered`` defaults to False); extra keys are ignored. ``timestamp`` values are
    datetimes (naive ones are UTC) or ints of epoch microseconds; ``headers`` values are
    ``{str: str}`` dicts as from :func:`render_headers`.
    """
    schema = arrow_schema(include_headers, include_offset=True)
    lengths = {len(v) for v in columns.values()}
    if len(lengths) > 1:
        raise ValueError(f"columns must have equal lengths, but got lengths {sorted(lengths)}")
    n = lengths.pop() if lengths else 0
    arrays: list[pa.Array] = []
    for field in schema:
        values = columns.get(field.name)
        if values is None:
            values = [False] * n if field.name == "redelivered" else [None] * n
        if field.name == "timestamp":
            arrays.append(_timestamp_array(values))
        elif field.name == "headers":
            arrays.append(_headers_array(values))
        elif field.name == "redelivered":
            if all(type(v) is bool for v in values):
                arrays.append(pa.array(values, type=pa.bool_()))
            else:
                arrays.append(pa.array([bool(v) for v in values], type=pa.bool_()))
        else:
            if field.name == "queue" and None in values:
                raise ValueError("the 'queue' column must not be null")
            arrays.append(pa.array(values, type=field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
