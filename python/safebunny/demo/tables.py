"""Reading the demo's Delta tables back for the summary."""

from __future__ import annotations

from typing import Any

from safebunny.delta.backend import delta_target

__all__ = ["read_table"]


def read_table(path: str, columns: list[str]) -> list[dict[str, Any]]:
    """The rows of the Delta table at ``path`` (empty when it was never written)."""
    found = delta_target(path).read(columns=columns)
    return [] if found is None else found.to_pylist()
