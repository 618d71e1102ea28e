"""Names a package re-exports, imported on first use (PEP 562).

A package lists its re-exports in ``_LAZY`` (name -> defining module) instead of importing its whole public
API, so a process that needs one module (Spark's source runner, each Python worker) does not load the
inbox's pandas and pyarrow.dataset (docs/design.md, Layout; docs/performance.md).
``tests/unit/test_layout.py`` checks those modules against the dependency rules as if they were imports.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["exports"]


def exports(package: str, lazy: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``, resolving each name of ``lazy`` from its module."""

    def __getattr__(name: str) -> Any:
        module = lazy.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)  # once: later lookups are plain attribute reads
        return value

    def __dir__() -> list[str]:  # the public names, not the module's imports (``sys``, ``Any``, ...)
        module = sys.modules[package]
        return sorted(set(getattr(module, "__all__", vars(module))) | set(lazy))

    return __getattr__, __dir__
