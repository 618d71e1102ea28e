"""safebunny's own error inside a Spark exception.

An error raised in Spark's Python workers (the source's reader process, a task, a ``foreachBatch``
handler called back from the JVM) reaches the driver as a ``StreamingQueryException``,
``AnalysisException``, ``PythonException`` or ``Py4JJavaError`` whose message holds the worker's
traceback as text, followed by Spark's own lines. :func:`error_of` finds the last
``safebunny...<Class>: <message>`` line there and rebuilds that error, class and message, so that
``except SafeBunnyError`` works and the message is the last line a user sees.
"""

from __future__ import annotations

import importlib
import re

from safebunny.errors import SafeBunnyError

__all__ = ["error_of", "message_of"]

# a traceback's last line: the exception's qualified class name, ": ", the message
_RAISED = re.compile(r"^\s*(?P<module>safebunny(?:\.\w+)*)\.(?P<cls>\w+): (?P<message>.+?)\s*$", re.M)


def _error_class(module: str, name: str) -> type[SafeBunnyError] | None:
    try:
        cls = getattr(importlib.import_module(module), name, None)
    except Exception:  # noqa: BLE001 - a module of another safebunny version: not ours to rebuild
        return None
    return cls if isinstance(cls, type) and issubclass(cls, SafeBunnyError) else None


def error_of(exc: BaseException | None) -> SafeBunnyError | None:
    """The :class:`SafeBunnyError` that ``exc`` carries (itself, a cause, or parsed from a Spark exception's
    message: same class, same message), or ``None`` when it carries none.

    Use it where a query's error surfaces::

        try:
            query.awaitTermination()
        except Exception as exc:
            raise (safebunny.error_of(exc) or exc) from exc
    """
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, SafeBunnyError):
            return exc
        found = None
        for match in _RAISED.finditer(str(exc)):
            cls = _error_class(match["module"], match["cls"])
            if cls is not None:
                found = (cls, match["message"])
        if found is not None:
            cls, message = found
            try:
                error = cls(message)
            except TypeError:  # a subclass with other required arguments: same class, same message
                error = cls.__new__(cls)
                Exception.__init__(error, message)
            error.__cause__ = exc
            return error
        exc = exc.__cause__ or exc.__context__
    return None


def message_of(exc: BaseException) -> str:
    """One line for logs: the safebunny error's message when ``exc`` carries one, else its first line."""
    error = error_of(exc)
    if error is not None:
        return f"{type(error).__name__}: {error}"
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
