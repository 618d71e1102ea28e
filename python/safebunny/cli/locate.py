"""Finding the saga a command works on.

``package.module:attribute``, ``path/to/file.py:attribute``, or a module or file that defines exactly one
:class:`safebunny.Saga` at top level (an error lists them when there are several); the attribute may be a
function without arguments that returns the saga (docs/operations.md, "Command line").
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

from safebunny.cli.exits import SAGA, CliError
from safebunny.spark.session import pickle_by_value

__all__ = ["load_saga", "split_locator"]


def is_saga(obj: Any) -> bool:
    """True for a :class:`safebunny.Saga` instance."""
    from safebunny import Saga

    return isinstance(obj, Saga)


def split_locator(locator: str) -> tuple[str, str | None, bool]:
    """``(module or path, attribute or None, is_file)`` for a saga locator (pure)."""
    if not locator or not locator.strip():
        raise CliError("no saga given: name it as 'package.module:attribute' or 'path/to/file.py'", SAGA)
    target, attribute = locator, None
    head, sep, tail = locator.rpartition(":")
    if sep and head and tail and "/" not in tail and "\\" not in tail and tail.isidentifier():
        target, attribute = head, tail
    is_file = target.endswith(".py") or "/" in target or os.sep in target
    if not is_file and not all(part.isidentifier() for part in target.split(".")):
        raise CliError(f"{locator!r} is neither a module path ('package.module[:attribute]') nor a .py file", SAGA)
    return target, attribute, is_file


def _import_file(path: str) -> Any:
    file = Path(path).expanduser().resolve()
    if not file.is_file():
        raise CliError(f"saga file {path!r} does not exist (looked at {file})", SAGA)
    name = f"safebunny_cli_saga_{abs(hash(str(file)))}"
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None or spec.loader is None:
        raise CliError(f"cannot load {path!r} as Python: give a .py file", SAGA)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    sys.path.insert(0, str(file.parent))
    spec.loader.exec_module(module)
    pickle_by_value(module)
    return module


def _import_module(name: str) -> Any:
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name and name.startswith(exc.name):
            raise CliError(f"module {name!r} not found: check the name, run from the directory that holds it, "
                           "or give the path of its .py file", SAGA) from None
        raise


def load_saga(locator: str) -> Any:
    """Import what ``locator`` names and return the saga (see the module docstring)."""
    target, attribute, is_file = split_locator(locator)
    try:
        module = _import_file(target) if is_file else _import_module(target)
    except CliError:
        raise
    except Exception as exc:  # the user's module failed while importing: say where
        raise CliError(f"importing {target!r} failed: {type(exc).__name__}: {exc}", SAGA) from exc
    if attribute is not None:
        if not hasattr(module, attribute):
            raise CliError(f"{target!r} has no attribute {attribute!r}; its sagas: {_sagas_in(module) or 'none'}",
                           SAGA)
        obj = getattr(module, attribute)
        if not is_saga(obj) and callable(obj):
            obj = obj()
        if not is_saga(obj):
            raise CliError(f"{locator!r} is a {type(obj).__name__}, not a safebunny.Saga", SAGA)
        return obj
    found = _sagas_in(module)
    if len(found) == 1:
        return getattr(module, found[0])
    if not found:
        raise CliError(f"{target!r} defines no safebunny.Saga at top level: name one as '{target}:attribute'", SAGA)
    raise CliError(f"{target!r} defines several sagas ({', '.join(found)}): pick one as '{target}:{found[0]}'", SAGA)


def _sagas_in(module: Any) -> list[str]:
    return sorted(name for name, value in vars(module).items() if not name.startswith("_") and is_saga(value))
