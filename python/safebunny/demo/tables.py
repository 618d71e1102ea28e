"""Reading the demo's Delta tables back for the summary."""

from __future__ import annotations

from typing import Any

__all__ = ["read_table"]


def read_table(path: str, columns: list[str]) -> list[dict[str, Any]]:
    """The rows of the Delta table at ``path`` (empty when it was never written), read with
    delta-rs' ``QueryBuilder``: a pyarrow dataset on the default filesystem can abort the process at
    exit (DESIGN.md, "The inbox")."""
    from deltalake import DeltaTable, QueryBuilder

    if not DeltaTable.is_deltatable(path):
        return []
    select = ", ".join(f'"{c}"' for c in columns)
    import pyarrow as pa

    result = QueryBuilder().register("t", DeltaTable(path)).execute(f"SELECT {select} FROM t").read_all()
    return pa.table(result).to_pylist()
