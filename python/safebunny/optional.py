"""Imports of packages a feature needs but the core can run without, with a clear error.

``require("rstream", "read stream queues over the stream protocol")`` returns the module, or raises
:class:`~safebunny.errors.SafeBunnyMissingDependencyError` naming the package, what needed it and the
``pip install`` line (docs/operations.md); :func:`available` answers without raising. Error paths never
import an optional package: they use :func:`optional_classes`, empty when the package is missing.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from safebunny.errors import SafeBunnyMissingDependencyError

__all__ = ["INSTALL", "require", "available", "optional_classes"]

#: module -> what to install (``pip install <this>``) to get it.
INSTALL: dict[str, str] = {
    "rstream": "'rstream>=0.20' (a dependency of safebunny: reinstall it with 'pip install safebunny')",
    "deltalake": "'deltalake>=1.0' (a dependency of safebunny: reinstall it with 'pip install safebunny')",
    "testcontainers": "'testcontainers[rabbitmq]'",
    "matplotlib": "'matplotlib>=3.7' (or 'safebunny[plots]')",
    "psutil": "'psutil' (or 'safebunny[bench]')",
    "tqdm": "'tqdm>=4.60' (or 'safebunny[plots]')",
}


def require(module: str, purpose: str) -> ModuleType:
    """Import ``module`` or raise :class:`SafeBunnyMissingDependencyError` saying what to install."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        top = module.split(".", 1)[0]
        install = INSTALL.get(top, repr(top))
        raise SafeBunnyMissingDependencyError(
            f"safebunny needs the package {top!r} to {purpose}, but it cannot be imported ({exc}). "
            f"Install it with: pip install {install}.",
            name=top,
        ) from None


def available(module: str) -> bool:
    """True when ``module`` can be imported (it is imported to find out)."""
    try:
        importlib.import_module(module)
        return True
    except ImportError:
        return False


def optional_classes(module: str, *names: str) -> tuple[type, ...]:
    """The classes ``names`` of ``module`` (for ``isinstance`` checks), or ``()`` when it is missing."""
    try:
        found = importlib.import_module(module)
    except ImportError:
        return ()
    return tuple(getattr(found, name) for name in names if isinstance(getattr(found, name, None), type))
