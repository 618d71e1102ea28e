"""A saga step's bodies, the one reader for row and DataFrame handlers alike, and the step's schema it reads
them with, parsed when the step is declared.

:class:`Body` reads the DDL itself: PySpark has no DDL parser without Spark (``StructType.fromDDL`` asks the
JVM of the active SparkContext, or the Spark Connect server), and a step is declared before any session
exists, where a typo must fail naming the step. :meth:`Body.read` is the only rule for what a body is; a body
that breaks it is a :class:`MalformedMessage` whose text is the reason poison keeps. The grammar, the JSON
types accepted per schema type and ``strict=False``: docs/sagas.md ("Step schemas are strict"). A row
handler's message (:meth:`Body.message`) and a DataFrame handler's input (:meth:`Body.prepare`, on the driver
from the batch's Arrow rows) come from the same reader, so both reject the same bodies, same reasons.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import re
from collections.abc import Callable, Iterable
from decimal import ROUND_HALF_UP, Context, Decimal
from typing import Any

import orjson
import pyarrow as pa

from safebunny.errors import SafeBunnyOptionError
from safebunny.exactly_once import FailedRow, Prepared

__all__ = ["Body", "MalformedMessage"]

_TOKEN = re.compile(r"\s*(`(?:[^`]|``)*`|\w+|'(?:[^'\\]|\\.)*'|\S)")
_RANGES = {"byte": (-2**7, 2**7), "short": (-2**15, 2**15), "integer": (-2**31, 2**31), "long": (-2**63, 2**63)}
_EXACT = Context(prec=100)  # a decimal(38, s) quantized without the default 28-digit context rounding it


class MalformedMessage(ValueError):
    """A message body that does not parse with the step's schema (goes to poison at once)."""


def _types() -> dict[str, Any]:
    from pyspark.sql import types as T

    return {"string": T.StringType, "varchar": T.StringType, "char": T.StringType, "int": T.IntegerType,
            "integer": T.IntegerType, "bigint": T.LongType, "long": T.LongType, "smallint": T.ShortType,
            "short": T.ShortType, "tinyint": T.ByteType, "byte": T.ByteType, "double": T.DoubleType,
            "float": T.FloatType, "real": T.FloatType, "boolean": T.BooleanType, "bool": T.BooleanType,
            "date": T.DateType, "timestamp": T.TimestampType, "timestamp_ltz": T.TimestampType,
            "timestamp_ntz": T.TimestampNTZType, "binary": T.BinaryType, "decimal": T.DecimalType,
            "dec": T.DecimalType, "numeric": T.DecimalType}


class _Ddl:
    """The DDL text's tokens, read by recursive descent; each error a ``ValueError`` saying what was expected."""

    def __init__(self, text: str) -> None:
        self.tokens = _TOKEN.findall(text)
        self.i = 0

    def peek(self) -> str | None:
        return self.tokens[self.i].lower() if self.i < len(self.tokens) else None

    def take(self, expected: str | None = None) -> str:
        if self.i >= len(self.tokens):
            raise ValueError(f"the schema ends early{f' (expected {expected!r})' if expected else ''}")
        token = self.tokens[self.i]
        if expected is not None and token.lower() != expected:
            raise ValueError(f"expected {expected!r} but found {token!r}")
        self.i += 1
        return token

    def accept(self, token: str) -> bool:
        """Whether the next token is ``token`` (then taken)."""
        return self.peek() == token and bool(self.take())

    def fields(self, end: str | None) -> Any:
        from pyspark.sql.types import StructField, StructType

        out = []
        while True:
            name = self.take()
            if not re.fullmatch(r"`(?:[^`]|``)*`|[A-Za-z_]\w*", name):
                raise ValueError(f"expected a field name but found {name!r}")
            self.accept(":")
            dtype = self.type()
            nullable = not (self.accept("not") and self.take("null"))
            if self.accept("comment") and not self.take().startswith("'"):
                raise ValueError(f"expected a quoted comment after COMMENT for field {name!r}")
            out.append(StructField(name[1:-1].replace("``", "`") if name[0] == "`" else name, dtype, nullable))
            if not self.accept(","):
                if end is None and self.peek() is not None:
                    raise ValueError(f"expected ',' after field {name!r} but found {self.tokens[self.i]!r}")
                if end is not None:
                    self.take(end)
                return StructType(out)
            if self.peek() == end:
                raise ValueError(f"a ',' after field {name!r} with no field after it")

    def type(self) -> Any:
        from pyspark.sql import types as T

        word = self.take().lower()
        if word in ("array", "map", "struct"):
            self.take("<")
            if word == "struct":
                return self.fields(">")
            inner = [self.type()]
            if word == "map" and self.take(","):
                inner.append(self.type())
            self.take(">")
            return T.ArrayType(*inner) if word == "array" else T.MapType(*inner)
        make = _types().get(word)
        if make is None:
            raise ValueError(f"unknown type {word!r}")
        args = []
        if self.accept("("):
            args.append(self.number())
            if make is T.DecimalType and self.accept(","):
                args.append(self.number())
            self.take(")")
        return make(*args) if make is T.DecimalType else make()

    def number(self) -> int:
        if not (self.peek() or "").isdigit():
            raise ValueError(f"expected a number but found {self.take()!r}")
        return int(self.take())


class _Wrong(Exception):
    """A value that does not fit its type (``dtype`` None: a null in a NOT NULL field); the field's path is
    filled in on the way out, innermost first."""

    def __init__(self, value: Any, dtype: Any, note: str = "") -> None:
        super().__init__()
        self.value, self.dtype, self.note, self.path = value, dtype, note, []

    def sentence(self) -> str:
        name = "".join(reversed(self.path)).removeprefix(".")
        if self.dtype is None:
            return f"field {name!r} is null or missing, but the schema says NOT NULL"
        return (f"field {name!r} has {_shown(self.value)} ({_json_kind(self.value)}), but the schema expects "
                f"{self.dtype.simpleString()}{self.note}")


def _json_kind(value: Any) -> str:
    kinds = ((bool, "a boolean"), ((int, float, Decimal), "a number"), (str, "a string"), (list, "an array"),
             (dict, "an object"))
    return next((kind for types, kind in kinds if isinstance(value, types)), type(value).__name__)


def _json(value: Any) -> str:
    return orjson.dumps(value, default=float).decode("utf-8", "replace")  # a Decimal read exactly is a number


def _shown(value: Any) -> str:
    text = _json(value)
    return text if len(text) <= 100 else text[:100] + "..."


def _number(value: Any) -> bool:
    return isinstance(value, (int, float, Decimal)) and not isinstance(value, bool)


class Body:
    """A step's body schema, parsed when the step is declared (``step`` names it in errors), and the reader
    of its bodies; see the module docstring."""

    def __init__(self, schema: Any, step: str, strict: bool = True) -> None:
        from pyspark.sql.types import StructType

        self.text = schema.simpleString() if isinstance(schema, StructType) else schema  # as the reasons quote it
        self.strict = strict
        self._zone: list[dt.tzinfo | None] = []  # the session's time zone, looked up once per read or batch
        if not isinstance(schema, StructType) and not (isinstance(schema, str) and schema.strip()):
            raise SafeBunnyOptionError(f"Step {step}: schema must be DDL text such as 'orderId string, qty int' or "
                                       f"a StructType; got {schema!r}.", "schema")
        try:
            self.struct = schema if isinstance(schema, StructType) else _Ddl(schema).fields(None)
            self._read = self._reader(self.struct)
        except ValueError as exc:
            raise SafeBunnyOptionError(
                f"Step {step}: schema {schema!r} does not parse: {exc}. Write it as 'name type, ...' with the Spark "
                "SQL types a JSON body can have (string, int, bigint, smallint, tinyint, double, float, boolean, "
                "date, timestamp, timestamp_ntz, binary, decimal(p,s), array<...>, map<string,...>, struct<...>) "
                "or pass a StructType of them.", "schema") from None
        exact = "decimal(" in self.struct.simpleString()  # read numbers as Decimal, not through a double
        self._loads: Callable[[Any], Any] = (lambda raw: json.loads(raw, parse_float=Decimal, parse_constant=_nan)
                                             ) if exact else orjson.loads

    def read(self, raw: bytes | str | None) -> tuple[dict[str, Any], dict[str, Any]]:
        """The body as a JSON object and its schema's fields read with their types; :class:`MalformedMessage`
        with the reason when it is not JSON, not an object, or (strict) a field does not match."""
        try:
            body = self._loads(raw or b"")
        except ValueError as exc:
            raise MalformedMessage(f"the body does not parse as JSON ({exc}): {(raw or b'')[:200]!r}") from None
        if not isinstance(body, dict):
            raise MalformedMessage(f"the body is JSON but not an object: {(raw or b'')[:200]!r}")
        try:
            return body, self._read(body)
        except _Wrong as wrong:
            raise MalformedMessage(f"the body does not match the schema '{self.text}': {wrong.sentence()}") from None

    def message(self, row: dict[str, Any]) -> dict[str, Any]:
        """A row handler's message: ``row`` (the source's columns) with the body's fields merged in, the
        schema's read with their types (``strict=False``: as they are); :class:`MalformedMessage` if the body
        does not parse."""
        self._zone.clear()
        body, fields = self.read(row.get("value"))
        return {**row, **body, **fields} if self.strict else {**row, **body}

    def prepare(self, table: pa.Table, schema: Any) -> Prepared:
        """A DataFrame handler's input (the step's ``prepare``): the batch's columns (``schema``) with the body's
        fields as columns (a field named like a source column replaces it), one row per message, and the
        bodies that do not parse rejected as ``MalformedMessage`` with the reason :meth:`read` gives."""
        from pyspark.sql.types import StructType

        self._zone.clear()
        ids = table.column("messageId").to_pylist()
        correlations = (table.column("correlationId").to_pylist() if "correlationId" in table.column_names
                        else [None] * table.num_rows)
        rows: list[dict[str, Any]] = []
        rejected: dict[str, FailedRow] = {}
        for mid, correlation, raw in zip(ids, correlations, table.column("value").to_pylist(), strict=True):
            try:
                rows.append(self.read(raw)[1])
            except MalformedMessage as exc:
                rejected[mid] = FailedRow(mid, str(exc), 1, correlation, MalformedMessage.__name__)
                rows.append({})
        names = set(self.struct.fieldNames())
        keep = [f for f in schema.fields if f.name not in names]
        fields = _nullable(self.struct).fields
        columns = [table.column(f.name) for f in keep]
        columns += [pa.array([r.get(f.name) for r in rows], type=_arrow_type(f.dataType)) for f in fields]
        out = StructType([*keep, *fields])
        return Prepared(pa.Table.from_arrays(columns, names=out.fieldNames()), out, rejected)

    def _reader(self, dtype: Any) -> Callable[[Any], Any]:
        """The function that reads a non-null JSON value as ``dtype``: the value with the type's Python type, or
        (strict) :class:`_Wrong`; a ``ValueError`` for a type a JSON body cannot have."""
        from pyspark.sql import types as T

        strict, text = self.strict, isinstance(dtype, (T.StringType, T.CharType, T.VarcharType))

        def check(ok: Callable[[Any], bool], convert: Callable[[Any], Any] | None = None,
                  note: str = "") -> Callable[[Any], Any]:
            def read(value: Any) -> Any:
                try:
                    if ok(value):
                        return value if convert is None else convert(value)
                    wrong = _Wrong(value, dtype)
                except (ValueError, ArithmeticError):
                    wrong = _Wrong(value, dtype, note)
                if strict:
                    raise wrong
                return _json(value) if text else None
            return read

        if text:
            return check(lambda v: isinstance(v, str))
        if isinstance(dtype, T.BooleanType):
            return check(lambda v: isinstance(v, bool))
        if isinstance(dtype, (T.ByteType, T.ShortType, T.IntegerType, T.LongType)):
            return check(lambda v: isinstance(v, int) and not isinstance(v, bool),
                         _within(*_RANGES[dtype.typeName()]), " (out of its range)")
        if isinstance(dtype, (T.FloatType, T.DoubleType)):
            return check(_number, float)
        if isinstance(dtype, T.DecimalType):
            return check(_number, _decimal(dtype.precision, dtype.scale), " (out of its range)")
        if isinstance(dtype, T.DateType):
            return check(lambda v: isinstance(v, str), dt.date.fromisoformat, " (not an ISO 8601 date)")
        if isinstance(dtype, (T.TimestampType, T.TimestampNTZType)):
            local = isinstance(dtype, T.TimestampNTZType)
            note = " (not an ISO 8601 timestamp without an offset)" if local else " (not an ISO 8601 timestamp)"
            return check(lambda v: isinstance(v, str), lambda v: self._timestamp(v, local), note)
        if isinstance(dtype, T.BinaryType):
            return check(lambda v: isinstance(v, str), lambda v: base64.b64decode(v, validate=True), " (not base64)")
        if isinstance(dtype, T.ArrayType):
            item = self._nullable(dtype.elementType, dtype.containsNull)
            return check(lambda v: isinstance(v, list), lambda v: _each(enumerate(v), lambda _: item, "[{}]"))
        if isinstance(dtype, T.MapType):
            if not isinstance(dtype.keyType, T.StringType):
                raise ValueError(f"map<{dtype.keyType.simpleString()}, ...> has keys that are not strings, as a "
                                 "JSON object's are")
            value = self._nullable(dtype.valueType, dtype.valueContainsNull)
            return check(lambda v: isinstance(v, dict),
                         lambda v: dict(zip(v, _each(v.items(), lambda _: value, "[{!r}]"), strict=True)))
        if isinstance(dtype, T.StructType):
            fields = {f.name: self._nullable(f.dataType, f.nullable) for f in dtype.fields}
            return check(lambda v: isinstance(v, dict), lambda v: dict(
                zip(fields, _each(((n, v.get(n)) for n in fields), fields.__getitem__, ".{}"), strict=True)))
        raise ValueError(f"type {dtype.simpleString()} is not one a JSON body can have")

    def _nullable(self, dtype: Any, nullable: bool) -> Callable[[Any], Any]:
        """``_reader(dtype)`` for a value that may be null: null passes unless NOT NULL (strict)."""
        read = self._reader(dtype)

        def maybe(value: Any) -> Any:
            if value is not None:
                return read(value)
            if self.strict and not nullable:
                raise _Wrong(None, None)
            return None
        return maybe

    def _timestamp(self, text: str, local: bool) -> dt.datetime:
        """An ISO 8601 timestamp: without an offset in the session's time zone; ``local`` (timestamp_ntz):
        without one only."""
        at = dt.datetime.fromisoformat(text)
        if local or at.tzinfo is not None:
            if local and at.tzinfo is not None:
                raise ValueError(text)
            return at
        if not self._zone:
            self._zone.append(_session_zone())
        return at.astimezone() if self._zone[0] is None else at.replace(tzinfo=self._zone[0])


def _each(items: Iterable[tuple[Any, Any]], reader: Callable[[Any], Callable[[Any], Any]], place: str) -> list[Any]:
    """``reader(key)(item)`` of each ``(key, item)`` of an array, map or struct; the place of an item that does not
    fit (``place`` formatted with its key) added to its path."""
    out, key = [], None
    try:
        for key, item in items:
            out.append(reader(key)(item))
    except _Wrong as wrong:
        wrong.path.append(place.format(key))
        raise
    return out


def _within(low: int, high: int) -> Callable[[int], int]:
    def fits(value: int) -> int:
        if not low <= value < high:
            raise ValueError(value)
        return value
    return fits


def _decimal(precision: int, scale: int) -> Callable[[Any], Decimal]:
    def fits(value: Any) -> Decimal:
        exact = value if isinstance(value, Decimal) else Decimal(str(value) if isinstance(value, float) else value)
        rounded = exact.quantize(Decimal(1).scaleb(-scale), ROUND_HALF_UP, _EXACT)
        if rounded.adjusted() >= precision - scale:
            raise ValueError(value)
        return rounded
    return fits


def _nan(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def _session_zone() -> dt.tzinfo | None:
    """The active session's ``spark.sql.session.timeZone``; None (the process's local zone) without one."""
    from zoneinfo import ZoneInfo

    from pyspark.sql import SparkSession

    spark = SparkSession.getActiveSession()
    name = spark.conf.get("spark.sql.session.timeZone") if spark is not None else None
    if not name:
        return None
    try:
        return ZoneInfo(name)
    except (ValueError, KeyError):  # an offset such as '+02:00' or 'Z'
        return dt.datetime.fromisoformat(f"2000-01-01T00:00{name}").tzinfo


def _nullable(dtype: Any) -> Any:
    """``dtype`` with every level nullable, as Spark's JSON reader types its output."""
    from pyspark.sql import types as T

    if isinstance(dtype, T.StructType):
        return T.StructType([T.StructField(f.name, _nullable(f.dataType)) for f in dtype.fields])
    if isinstance(dtype, (T.ArrayType, T.MapType)):
        return (T.ArrayType(_nullable(dtype.elementType)) if isinstance(dtype, T.ArrayType)
                else T.MapType(dtype.keyType, _nullable(dtype.valueType)))
    return dtype


def _arrow_type(dtype: Any) -> pa.DataType:
    """``dtype``'s Arrow type; timestamps in UTC (PySpark 4.3 asks for the zone, 4.2 takes UTC itself)."""
    from pyspark.sql.pandas.types import to_arrow_type

    try:
        return to_arrow_type(dtype, timezone="UTC")
    except TypeError:
        return to_arrow_type(dtype)
