"""A saga step's body schema: parsed when the step is declared, and checked strictly against bodies.

:func:`parse_schema` reads the DDL of a step's ``schema`` (``"orderId string, qty int"``) without
Spark, so a typo fails when the step is declared, naming the step; types it does not know are handed
to Spark's own parser when a session is active. :func:`mismatch` checks a parsed JSON body against
the schema as JSON types, with no coercion: Spark's JSON reader would turn ``17`` into the string
``"17"`` and ``"abc"`` for a ``long`` into null, and the step would apply a message it should park.
Fields the schema does not name are allowed (a producer may add fields before its consumers use them).
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from safebunny.errors import SafeBunnyOptionError

__all__ = ["parse_schema", "mismatch"]

_TOKEN = re.compile(r"\s*(?:(?P<name>`(?:[^`]|``)*`|[A-Za-z_][A-Za-z0-9_]*)|(?P<num>\d+)|(?P<str>'(?:[^'\\]|\\.)*')"
                    r"|(?P<sym>[<>(),:]))")
_RANGES = {"byte": (-2**7, 2**7), "short": (-2**15, 2**15), "integer": (-2**31, 2**31), "long": (-2**63, 2**63)}


def _simple_types() -> dict[str, Any]:
    from pyspark.sql import types as T

    return {"string": T.StringType, "int": T.IntegerType, "integer": T.IntegerType, "bigint": T.LongType,
            "long": T.LongType, "smallint": T.ShortType, "short": T.ShortType, "tinyint": T.ByteType,
            "byte": T.ByteType, "double": T.DoubleType, "float": T.FloatType, "real": T.FloatType,
            "boolean": T.BooleanType, "bool": T.BooleanType, "date": T.DateType, "timestamp": T.TimestampType,
            "timestamp_ltz": T.TimestampType, "timestamp_ntz": T.TimestampNTZType, "binary": T.BinaryType}


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens: list[str] = []
        pos = 0
        text = text.strip()
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if not m or m.end() == pos:
                raise ValueError(f"unexpected {text[pos:pos + 20]!r} at character {pos}")
            self.tokens.append(m.group(m.lastgroup or "sym"))
            pos = m.end()
            while pos < len(text) and text[pos].isspace():
                pos += 1
        self.i = 0

    def peek(self) -> str | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self, expected: str | None = None) -> str:
        token = self.peek()
        if token is None:
            raise ValueError(f"the schema ends early{f' (expected {expected!r})' if expected else ''}")
        if expected is not None and token.lower() != expected:
            raise ValueError(f"expected {expected!r} but found {token!r}")
        self.i += 1
        return token

    def fields(self, end: str | None) -> Any:
        from pyspark.sql.types import StructField, StructType

        out = []
        while self.peek() is not None and self.peek() != end:
            name = self.take()
            if not re.match(r"^(`.*`|[A-Za-z_][A-Za-z0-9_]*)$", name):
                raise ValueError(f"expected a field name but found {name!r}")
            name = name[1:-1].replace("``", "`") if name.startswith("`") else name
            if self.peek() == ":":
                self.take()
            dtype = self.type()
            nullable = True
            if (self.peek() or "").lower() == "not":
                self.take()
                self.take("null")
                nullable = False
            if (self.peek() or "").lower() == "comment":
                self.take()
                if not (self.peek() or "").startswith("'"):
                    raise ValueError(f"expected a quoted comment after COMMENT for field {name!r}")
                self.take()
            out.append(StructField(name, dtype, nullable))
            if self.peek() == ",":
                self.take()
                if self.peek() == end:
                    raise ValueError(f"a ',' after field {name!r} with no field after it")
            elif self.peek() != end:
                raise ValueError(f"expected ',' after field {name!r} but found {self.peek()!r}")
        if not out:
            raise ValueError("no fields")
        return StructType(out)

    def type(self) -> Any:
        from pyspark.sql import types as T

        word = self.take().lower()
        if word in ("decimal", "dec", "numeric"):
            precision, scale = 10, 0
            if self.peek() == "(":
                self.take()
                precision = int(self.take())
                if self.peek() == ",":
                    self.take()
                    scale = int(self.take())
                self.take(")")
            return T.DecimalType(precision, scale)
        if word in ("varchar", "char"):
            self.take("(")
            self.take()
            self.take(")")
            return T.StringType()
        if word == "array":
            self.take("<")
            element = self.type()
            self.take(">")
            return T.ArrayType(element, True)
        if word == "map":
            self.take("<")
            key = self.type()
            self.take(",")
            value = self.type()
            self.take(">")
            return T.MapType(key, value, True)
        if word == "struct":
            self.take("<")
            inner = self.fields(">")
            self.take(">")
            return inner
        simple = _simple_types().get(word)
        if simple is None:
            raise ValueError(f"unknown type {word!r}")
        return simple()


def parse_schema(schema: Any, step: str) -> Any:
    """``schema`` (DDL text or a ``StructType``) as a ``StructType``; a clear error naming ``step`` if it
    does not parse."""
    from pyspark.sql.types import StructType

    if isinstance(schema, StructType):
        return schema
    if not isinstance(schema, str) or not schema.strip():
        raise SafeBunnyOptionError(f"Step {step}: schema must be DDL text such as 'orderId string, qty int' or a "
                                   f"StructType; got {schema!r}.", "schema")
    try:
        parser = _Parser(schema)
        return parser.fields(None)
    except ValueError as exc:
        problem = str(exc)
    spark_error = _spark_parse(schema)
    if not isinstance(spark_error, str):
        return spark_error
    raise SafeBunnyOptionError(f"Step {step}: schema {schema!r} does not parse: {problem}{spark_error}. Write it "
                               "as 'name type, ...' with Spark SQL types (string, int, bigint, double, boolean, "
                               "date, timestamp, decimal(p,s), array<...>, map<...>, struct<...>) or pass a "
                               "StructType.", "schema")


def _spark_parse(schema: str) -> Any:
    """Spark's own DDL parser when a session is active (types this module does not know); else a note."""
    from pyspark import SparkContext
    from pyspark.sql.types import StructType

    if SparkContext._active_spark_context is None:
        return ""
    try:
        return StructType.fromDDL(schema)
    except Exception as exc:  # noqa: BLE001 - Spark's parse error becomes part of ours
        return f" (Spark: {str(exc).strip().splitlines()[0][:300]})"


def _json_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _shown(value: Any) -> str:
    text = orjson.dumps(value, default=str).decode("utf-8", "replace")
    return text if len(text) <= 100 else text[:100] + "..."


def mismatch(fields: dict[str, Any], schema: Any, path: str = "") -> str | None:
    """The first field of ``fields`` (a parsed JSON object) that does not match ``schema``, as a
    sentence naming the field, the value and the expected type; ``None`` when all match."""
    for f in schema.fields:
        name = f"{path}{f.name}"
        problem = _check(fields.get(f.name), f.dataType, f.nullable, name)
        if problem:
            return problem
    return None


def _check(value: Any, dtype: Any, nullable: bool, name: str) -> str | None:
    from pyspark.sql import types as T

    if value is None:
        return None if nullable else f"field {name!r} is null or missing, but the schema says NOT NULL"
    wrong = f"field {name!r} has {_shown(value)} ({_json_kind(value)}), but the schema expects {dtype.simpleString()}"
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if isinstance(dtype, (T.StringType, T.BinaryType, T.DateType, T.TimestampType, T.TimestampNTZType)):
        return None if isinstance(value, str) else wrong
    if isinstance(dtype, T.BooleanType):
        return None if isinstance(value, bool) else wrong
    if isinstance(dtype, (T.ByteType, T.ShortType, T.IntegerType, T.LongType)):
        if not number or not isinstance(value, int):
            return wrong
        low, high = _RANGES[dtype.typeName()]
        return None if low <= value < high else f"{wrong} (out of its range)"
    if isinstance(dtype, (T.FloatType, T.DoubleType, T.DecimalType)):
        return None if number else wrong
    if isinstance(dtype, T.ArrayType):
        if not isinstance(value, list):
            return wrong
        for i, item in enumerate(value):
            problem = _check(item, dtype.elementType, dtype.containsNull, f"{name}[{i}]")
            if problem:
                return problem
        return None
    if isinstance(dtype, T.MapType):
        if not isinstance(value, dict):
            return wrong
        for key, item in value.items():
            problem = _check(item, dtype.valueType, dtype.valueContainsNull, f"{name}[{key!r}]")
            if problem:
                return problem
        return None
    if isinstance(dtype, T.StructType):
        return mismatch(value, dtype, f"{name}.") if isinstance(value, dict) else wrong
    return None  # a type without a JSON rule of ours (variant, interval): Spark's reader decides
