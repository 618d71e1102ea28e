"""safebunny's own error inside a Spark exception.

An error raised in Spark's Python workers reaches the driver as Spark's exception, whose message holds the
worker's traceback as text: :func:`error_of` rebuilds the last ``safebunny...<Class>: <message>`` there, class
and message (docs/operations.md, "Errors"). :func:`raised_in_python` finds the Python exception a worker's
traceback ends with, :func:`is_plan_error` whether a failure is a plan error (an ``AnalysisException``, which
fails again on every restart), and :func:`is_worker_start_timeout` whether Spark's own Python process for a
query failed to start in time (its fixed 10 s to connect back, missed on a loaded machine).
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterator

from safebunny.errors import SafeBunnyError

__all__ = ["error_of", "is_plan_error", "is_worker_start_timeout", "message_of", "raised_in_python"]

# a traceback's last line: the exception's qualified class name, ": ", the message
_RAISED = re.compile(r"^\s*(?P<module>safebunny(?:\.\w+)*)\.(?P<cls>\w+): (?P<message>.+?)\s*$", re.M)
_TRACEBACK = "Traceback (most recent call last):"
# the line a Python traceback ends with: ``[module.]Class: message`` (or the class alone), not indented
_EXCEPTION_LINE = re.compile(r"^(?P<qualified>[A-Za-z_][\w.]*)(?::\s?(?P<message>.*))?$")
_PLAN_ERRORS = ("AnalysisException", "ParseException")
# PythonWorkerFactory, when a Python process it spawned did not connect back within its fixed 10 s
_WORKER_START_TIMEOUT = "Python worker failed to connect back"


def _error_class(module: str, name: str) -> type[SafeBunnyError] | None:
    try:
        cls = getattr(importlib.import_module(module), name, None)
    except Exception:  # noqa: BLE001 - a module of another safebunny version: not ours to rebuild
        return None
    return cls if isinstance(cls, type) and issubclass(cls, SafeBunnyError) else None


def error_of(exc: BaseException | None) -> SafeBunnyError | None:
    """The :class:`SafeBunnyError` that ``exc`` carries (itself, a cause, or parsed from a Spark exception's
    message: same class, same message), or ``None`` when it carries none (use: docs/operations.md, "Errors")."""
    for link in _chain(exc):
        if isinstance(link, SafeBunnyError):
            return link
        found = None
        for match in _RAISED.finditer(str(link)):
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
            error.__cause__ = link
            return error
    return None


def message_of(exc: BaseException) -> str:
    """One line for logs: the safebunny error's message when ``exc`` carries one, else its first line."""
    error = error_of(exc)
    if error is not None:
        return f"{type(error).__name__}: {error}"
    raised = raised_in_python(exc)  # Py4J's "An exception was raised by the Python Proxy" says nothing
    if raised is not None:
        return f"{raised[0]}: {raised[1]}" if raised[1] else raised[0]
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def raised_in_python(exc: BaseException | str) -> tuple[str, str] | None:
    """``(class name, message's first line)`` of the Python exception that the last traceback in ``exc``'s text
    ends with (a UDF's ``ValueError`` inside Spark's ``PythonException``, the ``AnalysisException`` a
    ``foreachBatch`` function raised inside the JVM's error), or ``None`` when the text holds no traceback.
    The class name is without its module (``BadOrder`` for ``shop.errors.BadOrder``)."""
    text = exc if isinstance(exc, str) else str(exc)
    start = text.rfind(_TRACEBACK)
    if start < 0:
        return None
    for line in text[start + len(_TRACEBACK):].splitlines():
        if not line.strip() or line.startswith((" ", "\t")):
            continue  # the frames, indented
        match = _EXCEPTION_LINE.match(line.rstrip())
        if match is None:
            return None
        return match["qualified"].rsplit(".", 1)[-1], (match["message"] or "").strip()
    return None


def is_plan_error(exc: BaseException | None) -> bool:
    """Whether ``exc`` (or the Python exception its text ends with) is a plan error: Spark's
    ``AnalysisException`` (an unknown column, a type mismatch) or a parse error. Such an error comes back on
    every restart from the same checkpoint, so it is not worth one."""
    for link in _chain(exc):
        if any(cls.__name__ in _PLAN_ERRORS for cls in type(link).__mro__):
            return True
        raised = raised_in_python(link)
        if raised is not None and raised[0] in _PLAN_ERRORS:
            return True
    return False


def is_worker_start_timeout(exc: BaseException | None) -> bool:
    """Whether ``exc`` says a Python process Spark spawned (a streaming source's runner, a planner) did not connect
    back within Spark's fixed 10 s (``PythonWorkerFactory``): the machine was loaded, the query never ran a batch,
    and starting it again is the remedy; it says nothing about the step."""
    return any(_WORKER_START_TIMEOUT in str(link) for link in _chain(exc))


def _chain(exc: BaseException | None) -> Iterator[BaseException]:
    """``exc``, then its cause (or context), and so on, each once."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__
