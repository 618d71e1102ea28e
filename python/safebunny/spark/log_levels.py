"""Spark's own log lines that repeat what safebunny already says once, turned down in the driver's JVM.

:func:`quiet_task_failures` turns Spark's executor and task-set loggers off while a step isolates failing rows
(and for :data:`QUIET_GRACE_S` after); :func:`note_streaming_started` lets Spark's adaptive-execution note
through once; :func:`quiet_query_context` drops PySpark's JSON record of a handler's plan error in the step's
thread. What is turned down and why: docs/operations.md ("Spark's own lines are kept short").
``SAFEBUNNY_LOG_LEVEL=INFO`` (or ``DEBUG``) leaves every Spark logger as it is. On a session without a
JVM in this process (Spark Connect) nothing is changed.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from safebunny.logs import LEVEL_ENV

__all__ = ["quiet_task_failures", "quiet_query_context", "note_streaming_started", "TASK_FAILURE_LOGGERS",
           "STREAMING_NOTE_LOGGER"]

log = logging.getLogger("safebunny.step")

#: the loggers that print a failed task's traceback (local mode: the executor runs in the driver's JVM)
TASK_FAILURE_LOGGERS = ("org.apache.spark.executor.Executor", "org.apache.spark.scheduler.TaskSetManager")
STREAMING_NOTE_LOGGER = "org.apache.spark.sql.execution.streaming.runtime.ResolveWriteToStream"

#: how long the task-failure loggers stay off after the last quiet block ends (late task failures of its jobs)
QUIET_GRACE_S = 5.0

_lock = threading.Lock()
_quiet_users = 0
_restore: threading.Timer | None = None
_saved: dict[str, Any] = {}
_noted = False


def _verbose() -> bool:
    return os.environ.get(LEVEL_ENV, "WARNING").upper() in ("INFO", "DEBUG", "NOTSET")


def _logger(spark: Any, name: str) -> Any:
    """The log4j 2 core logger ``name`` of the session's JVM, or None (Spark Connect, another logging backend).

    Its level is set on the logger itself, as Spark's ``Logging`` does for the root logger: changing the
    configuration instead (``Configurator.setLevel``) would reset every logger to the configuration file's
    levels, undoing Spark's WARN default."""
    try:
        logger = _jvm(spark).org.apache.logging.log4j.LogManager.getLogger(name)
        return logger if logger.getClass().getName() == "org.apache.logging.log4j.core.Logger" else None
    except Exception:  # noqa: BLE001 - no JVM here: leave Spark's logging alone
        return None


def _jvm(spark: Any) -> Any:
    return spark._jvm if getattr(spark, "_jvm", None) is not None else spark.sparkContext._jvm


def _level(spark: Any, name: str) -> Any:
    return getattr(_jvm(spark).org.apache.logging.log4j.Level, name)


@contextmanager
def quiet_task_failures(spark: Any) -> Iterator[None]:
    """Spark's task-failure loggers off while the block runs (nested and concurrent uses share one switch)."""
    global _quiet_users, _restore
    if _verbose():
        yield
        return
    with _lock:
        if _restore is not None:  # still quiet from the last block: keep it so
            _restore.cancel()
            _restore = None
        if _quiet_users == 0 and not _saved:
            try:
                for name in TASK_FAILURE_LOGGERS:
                    logger = _logger(spark, name)
                    if logger is not None:
                        _saved[name] = (logger, logger.getLevel())
                        logger.setLevel(_level(spark, "OFF"))
            except Exception as exc:  # noqa: BLE001 - logging only: never fail a batch for it
                log.debug("could not turn Spark's task-failure logs down: %s", exc)
        _quiet_users += 1
    try:
        yield
    finally:
        with _lock:
            _quiet_users -= 1
            if _quiet_users == 0 and _saved:
                _restore = threading.Timer(QUIET_GRACE_S, _restore_levels)
                _restore.daemon = True
                _restore.start()


def _restore_levels() -> None:
    global _restore
    with _lock:
        if _quiet_users or _restore is None:
            return  # a new quiet block started meanwhile: it restores them
        _restore = None
        try:
            for logger, saved in _saved.values():
                logger.setLevel(saved)
        except Exception as exc:  # noqa: BLE001
            log.debug("could not restore Spark's task-failure logs: %s", exc)
        _saved.clear()


def note_streaming_started(spark: Any) -> None:
    """Called after a streaming query started: Spark's per-query streaming notes are shown once per process."""
    global _noted
    if _noted or _verbose():
        return
    _noted = True
    logger = _logger(spark, STREAMING_NOTE_LOGGER)
    if logger is None:
        return
    try:
        logger.setLevel(_level(spark, "ERROR"))
    except Exception as exc:  # noqa: BLE001
        log.debug("could not turn Spark's streaming notes down: %s", exc)


#: PySpark's loggers of an analysis error's query context (``pyspark.errors.exceptions.base``)
QUERY_CONTEXT_LOGGERS = ("DataFrameQueryContextLogger", "SQLQueryContextLogger")
_in_step = threading.local()


def _outside_steps(record: logging.LogRecord) -> bool:
    """The filter of those loggers (a callable is one): a record passes unless its thread is quieted."""
    return not getattr(_in_step, "quiet", False)


@contextmanager
def quiet_query_context() -> Iterator[None]:
    """PySpark's query-context error records off in this thread while the block runs."""
    if _verbose():
        yield
        return
    for name in QUERY_CONTEXT_LOGGERS:
        logger = _pyspark_logger(name)
        if _outside_steps not in logger.filters:
            logger.addFilter(_outside_steps)
    before = getattr(_in_step, "quiet", False)
    _in_step.quiet = True
    try:
        yield
    finally:
        _in_step.quiet = before


def _pyspark_logger(name: str) -> logging.Logger:
    """PySpark's own logger ``name`` (made as PySpark makes it, with its JSON handler, when it is new)."""
    from pyspark.logger import PySparkLogger  # PySpark 4.0 and later (safebunny.spark.version.MINIMUM)

    return PySparkLogger.getLogger(name)

