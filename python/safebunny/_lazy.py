"""Names a package re-exports, imported on first use (PEP 562).

A package lists its re-exports in ``_LAZY`` (name -> defining module) instead of importing its whole public
API, so a process that needs one module (Spark's source runner, each Python worker) does not load the
inbox's pandas and pyarrow.dataset (docs/design.md, Layout; docs/performance.md).
``tests/unit/test_layout.py`` checks those modules against the dependency rules as if they were imports.
"""

from __future__ import annotations

import importlib
import importlib.abc
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["exports", "MOVED", "refuse_moved"]

#: module paths that moved -> where each is now (CHANGELOG.md); importing an old path raises our error naming it
MOVED = {f"safebunny.saga.{module}": f"safebunny.saga.{room}.{module}" for room, modules in (
    ("define", ("bodies", "config", "definition", "graph", "names", "retry", "topology")),
    ("run", ("drain", "failures", "leases", "parked_ids", "queries", "reports", "republish", "runner")),
    ("look", ("instance_state", "instances", "metrics", "parked", "status", "trace", "view", "view_html")),
) for module in modules}


class _Moved(importlib.abc.MetaPathFinder):
    """Last on ``sys.meta_path``: asked only for a module no other finder has, it answers an old path of
    :data:`MOVED` with :class:`~safebunny.errors.SafeBunnyMovedError` instead of Python's bare "No module"."""

    def find_spec(self, name: str, path: Sequence[str] | None = None, target: Any = None) -> None:
        moved = MOVED.get(name)
        if moved is not None:
            from safebunny.errors import SafeBunnyMovedError

            raise SafeBunnyMovedError(f"{name} moved to {moved}: import it from there (CHANGELOG.md lists every "
                                      "public name that moved).", name=name)


def refuse_moved() -> None:
    """Install the finder of :data:`MOVED`'s old paths (once)."""
    if not any(isinstance(finder, _Moved) for finder in sys.meta_path):
        sys.meta_path.append(_Moved())


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
