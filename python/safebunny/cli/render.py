"""Turning what the saga API returns into rows, aligned text tables and JSON (pure functions), and printing a
command's result: a table, or JSON with ``--json``."""

from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import enum
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

__all__ = ["to_rows", "table", "to_json", "cell", "key_values", "print_rows", "print_record"]


def _as_dict(item: Any) -> dict[str, Any]:
    if isinstance(item, Mapping):
        return dict(item)
    if dataclasses.is_dataclass(item) and not isinstance(item, type):
        return {f.name: getattr(item, f.name) for f in dataclasses.fields(item)}
    return dict(item._asdict())  # named tuples


def to_rows(obj: Any) -> list[dict[str, Any]]:
    """A list of plain dicts from: a sequence of dicts, dataclasses or named tuples (what the saga API returns);
    a pandas or pyarrow table; a mapping of name to record (the name becomes column ``name`` unless the record
    has one); or None (no rows)."""
    if obj is None:
        return []
    if hasattr(obj, "to_pylist"):  # pyarrow Table / RecordBatch
        return [dict(r) for r in obj.to_pylist()]
    if hasattr(obj, "to_dict") and hasattr(obj, "columns") and hasattr(obj, "iloc"):  # pandas
        return [dict(r) for r in obj.to_dict(orient="records")]
    if isinstance(obj, Mapping):
        rows = []
        for key, value in obj.items():
            row = _as_dict(value)
            rows.append(row if "name" in row else {"name": key, **row})
        return rows
    return [_as_dict(item) for item in obj]


def cell(value: Any) -> str:
    """One value as table text: None is empty, floats short, times to the second, bytes as text."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:,.1f}" if abs(value) >= 100 else f"{value:.3g}"
    if isinstance(value, _dt.datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S")
    if isinstance(value, (bytes, bytearray, memoryview)):
        text = bytes(value).decode("utf-8", errors="replace")
        return text if len(text) <= 60 else text[:57] + "..."
    if isinstance(value, enum.Enum):
        return str(value.value)
    if isinstance(value, Mapping):
        return ", ".join(f"{k}={cell(v)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return ", ".join(cell(v) for v in value)
    return str(value)


def _numeric(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None,
          headers: Mapping[str, str] | None = None, max_width: int = 48) -> str:
    """Rows as an aligned text table: a header line, then one line per row. Numbers are right-aligned;
    a cell wider than ``max_width`` is cut with ``...``. ``columns`` picks and orders the columns
    (default: every key, in first-seen order); ``headers`` renames them."""
    if columns is None:
        seen: dict[str, None] = {}
        for row in rows:
            seen.update(dict.fromkeys(row))
        columns = list(seen)
    if not columns:
        return ""
    names = [(headers or {}).get(c, c) for c in columns]
    texts = [[cell(row.get(c)) for c in columns] for row in rows]
    texts = [[t if len(t) <= max_width else t[: max_width - 3] + "..." for t in line] for line in texts]
    right = [bool(rows) and all(_numeric(r.get(c)) or r.get(c) is None for r in rows) for c in columns]
    widths = [max([len(n)] + [len(t[i]) for t in texts]) for i, n in enumerate(names)]

    def fmt(values: Sequence[str]) -> str:
        parts = [v.rjust(w) if r else v.ljust(w) for v, w, r in zip(values, widths, right, strict=True)]
        return "  ".join(parts).rstrip()

    return "\n".join([fmt(names), *(fmt(t) for t in texts)])


def key_values(record: Mapping[str, Any]) -> str:
    """One record as ``key: value`` lines, keys aligned."""
    if not record:
        return ""
    width = max(len(str(k)) for k in record)
    lines = []
    for key, value in record.items():
        if isinstance(value, Mapping) and value:
            lines.append(f"{str(key).ljust(width)}:")
            lines.extend(f"  {k}: {cell(v)}" for k, v in value.items())
        else:
            lines.append(f"{str(key).ljust(width)}: {cell(value)}")
    return "\n".join(lines)


def _default(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", errors="replace")
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    if isinstance(value, _dt.timedelta):
        return value.total_seconds()
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return str(value)


def to_json(obj: Any) -> str:
    """``obj`` as indented JSON (datetimes ISO 8601, bytes as UTF-8 text, anything else ``str``)."""
    return orjson.dumps(obj, default=_default, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS).decode()


def print_rows(args: argparse.Namespace, rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None,
               empty: str = "(none)") -> None:
    """Rows as JSON (every field, with ``--json``) or as a table of ``columns``."""
    if args.json:
        print(to_json(list(rows)))
    elif rows:
        print(table(rows, columns))
    else:
        print(empty)


def print_record(args: argparse.Namespace, record: Mapping[str, Any]) -> None:
    """One record as JSON or as ``key: value`` lines."""
    print(to_json(record) if args.json else key_values(record))
