"""Isolating the rows that make a handler fail, by bisection, within a budget of sub-jobs.

A batch is replayed exactly after a crash, so a row that makes the handler fail would fail the
query at every restart. :func:`bisect` runs the handler on halves of the failing set until the
failing rows stand alone; those are returned with the reason, the others with their results.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from safebunny.spark.exceptions import raised_in_python

__all__ = ["bisect", "describe"]

K = TypeVar("K")
R = TypeVar("R")


@dataclass
class Isolation(Generic[K, R]):
    """The results of the chunks that ran, and the keys that failed with their reasons."""

    results: list[R] = field(default_factory=list)
    failed: dict[K, tuple[str, str]] = field(default_factory=dict)  # key -> (error type, reason)
    jobs: int = 0


def describe(exc: BaseException, limit: int = 1500) -> tuple[str, str]:
    """(error type, a one-paragraph reason) for an exception, Python and Spark errors alike. For an error a
    UDF raised in a Python worker (Spark's ``PythonException``) the type is the class the UDF raised
    (``ValueError``), so ``Retry(poison_on=("ValueError",))`` matches it."""
    text = str(exc).strip()
    error_type = type(exc).__name__
    # Spark wraps the worker's traceback; keep its last line, which says what
    if "Traceback (most recent call last)" in text:
        raised = raised_in_python(text)
        lines = [ln for ln in text.splitlines() if ln.strip()]
        text = next((ln for ln in reversed(lines) if not ln.startswith((" ", "\t", "at "))), lines[-1])
        if raised is not None:  # the class is the error type: the reason is its message, as for a row handler
            error_type = raised[0]
            qualified = text.split(": ", 1)[0]
            if ": " in text and qualified.rsplit(".", 1)[-1] == error_type:
                text = text.split(": ", 1)[1]
    return error_type, text[:limit]


def bisect(keys: Sequence[K], run: Callable[[Sequence[K]], R], max_jobs: int = 64,
           fatal: Callable[[BaseException], bool] = lambda exc: False) -> Isolation[K, R]:
    """Run ``run(keys)``; on failure split the keys in halves and recurse, using at most ``max_jobs`` calls
    (docs/exactly-once.md, "Failing rows never wedge a step"); when the budget runs out, the keys of every chunk
    still failing are failed together. An error for which ``fatal(exc)`` is true is re-raised at once."""
    out: Isolation[K, R] = Isolation()
    pending: list[Sequence[K]] = [list(keys)] if keys else []
    while pending:
        chunk = pending.pop(0)
        out.jobs += 1
        try:
            out.results.append(run(chunk))
            continue
        except Exception as exc:  # noqa: BLE001 - any failure of the handler's job is isolated
            if fatal(exc):
                raise
            error = describe(exc)
        if len(chunk) == 1 or out.jobs + len(pending) + 2 > max_jobs:
            reason = error[1] if len(chunk) == 1 else (
                f"{error[1]} (failed in a group of {len(chunk)} rows: the isolation budget of {max_jobs} "
                "sub-jobs was spent; raise maxIsolationJobs to isolate further)")
            for key in chunk:
                out.failed[key] = (error[0], reason)
            continue
        half = len(chunk) // 2
        pending[:0] = [chunk[:half], chunk[half:]]
    return out
