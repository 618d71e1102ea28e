"""Printing a command's result: an aligned table, or JSON with ``--json``."""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from typing import Any

from safebunny.cli.render import key_values, table, to_json

__all__: list[str] = []


def wants_json(args: argparse.Namespace) -> bool:
    """True when the user asked for ``--json``."""
    return bool(getattr(args, "json", False))


def print_rows(args: argparse.Namespace, rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None,
               headers: Mapping[str, str] | None = None, empty: str = "(none)") -> None:
    """Rows as JSON (every field) or as a table of ``columns``."""
    if wants_json(args):
        print(to_json(list(rows)))
    elif rows:
        print(table(rows, columns, headers))
    else:
        print(empty)


def print_record(args: argparse.Namespace, record: Mapping[str, Any]) -> None:
    """One record as JSON or as ``key: value`` lines."""
    print(to_json(record) if wants_json(args) else key_values(record))
