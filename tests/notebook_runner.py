"""Run a Databricks source-format notebook (``# Databricks notebook source``) locally.

Cells are split on ``# COMMAND ----------``. Python cells run in one namespace holding
``spark``, a local ``dbutils`` whose widgets return their defaults (or values passed in) and a ``displayHTML``
that keeps what it was given (in ``displayed``);
``%sql`` cells run through ``spark.sql``; ``%md`` cells are skipped; any other magic fails,
so a notebook cannot silently skip work here that it does on a cluster.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

__all__ = ["run_notebook", "split_cells"]

_SEPARATOR = re.compile(r"^# COMMAND -+\s*$", re.MULTILINE)


def split_cells(source: str) -> list[str]:
    header = "# Databricks notebook source"
    if not source.startswith(header):
        raise ValueError(f"not a Databricks source-format notebook: the first line must be {header!r}")
    return [c.strip("\n") for c in _SEPARATOR.split(source[len(header):]) if c.strip()]


class _Widgets:
    def __init__(self, values: dict[str, str]) -> None:
        self._values = dict(values)

    def text(self, name: str, default: str, label: str | None = None) -> None:
        self._values.setdefault(name, default)

    def get(self, name: str) -> str:
        return self._values[name]


class LocalDbutils:
    """The part of Databricks' ``dbutils`` the notebooks use: widgets."""

    def __init__(self, widgets: dict[str, str]) -> None:
        self.widgets = _Widgets(widgets)


def run_notebook(path: Path, spark: Any, widgets: dict[str, str] | None = None) -> dict[str, Any]:
    """Execute every cell of ``path``; returns the notebook's namespace."""
    displayed: list[str] = []  # what the notebook passed to displayHTML, as Databricks would render it
    namespace: dict[str, Any] = {"spark": spark, "dbutils": LocalDbutils(widgets or {}), "__name__": "__main__",
                                 "displayHTML": lambda html: displayed.append(str(html)), "displayed": displayed}
    for number, cell in enumerate(split_cells(path.read_text("utf-8")), start=1):
        lines = cell.splitlines()
        if lines[0].startswith("# MAGIC"):
            magic = lines[0].removeprefix("# MAGIC").strip()
            body = "\n".join(line.removeprefix("# MAGIC").removeprefix(" ") for line in lines[1:])
            if magic == "%md":
                continue
            if magic == "%sql":
                spark.sql(body)
                continue
            raise ValueError(f"{path.name} cell {number}: magic {magic!r} is not supported by the local runner")
        exec(compile(cell, f"{path.name}[cell {number}]", "exec"), namespace)
    return namespace
