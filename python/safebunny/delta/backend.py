"""The one place a Delta table's backend is chosen: delta-rs for a path, Spark Delta for a name.

:func:`delta_target` picks delta-rs for a path (:class:`~safebunny.delta.delta_rs.DeltaRsTarget`, fenceable)
and Spark Delta for a name (:class:`~safebunny.delta.spark_delta.SparkDeltaTarget`, which an inbox given by
path may also choose); why once: docs/design.md. Apart from the interface (:mod:`.target`), so that the
backends import the interface and only this module imports the backends.
"""

from __future__ import annotations

from typing import Any

from safebunny.delta.target import DeltaTarget, is_path

__all__ = ["delta_target", "table_identity"]


def delta_target(table: str, spark: Any = None, backend: str = "auto", what: str = "The Delta table",
                 option: str = "table", checked: bool = False) -> DeltaTarget:
    """The target of ``table``: delta-rs for a path, Spark Delta for a name (``backend`` forces one). ``what`` and
    ``option`` name it in errors; ``spark``: the session of a Spark Delta target (else the thread's active one);
    ``checked``: a Spark Delta write first checks that the session has Delta."""
    if backend == "auto":
        backend = "delta-rs" if is_path(table) else "spark"
    if backend == "spark":
        from safebunny.delta.spark_delta import SparkDeltaTarget

        return SparkDeltaTarget(table, spark, what, checked)
    from safebunny.delta.delta_rs import DeltaRsTarget

    return DeltaRsTarget(table, what, option)


def table_identity(table: str, spark: Any = None) -> str:
    """What ``table`` is, whatever its spelling (:meth:`DeltaTarget.identity`): a path itself, a name the fully
    qualified name the catalog resolves it to; ``spark``: the session that resolves it."""
    return table if is_path(table) else delta_target(table, spark).identity()
