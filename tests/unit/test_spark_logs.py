"""Which Spark loggers safebunny turns down, and when not (pure logic: a stand-in JVM records the calls; the
e2e test ``tests/e2e/test_logs.py`` counts a real saga's lines)."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from safebunny.spark import log_levels as spark_logs


class _Logger:
    def __init__(self, calls: list, name: str) -> None:
        self.calls, self.name, self.level = calls, name, "WARN"

    def getClass(self):  # noqa: N802 - the JVM's method name
        return SimpleNamespace(getName=lambda: "org.apache.logging.log4j.core.Logger")

    def getLevel(self):  # noqa: N802
        return self.level

    def setLevel(self, level):  # noqa: N802
        self.calls.append((self.name, level))
        self.level = level


def _spark(calls: list) -> SimpleNamespace:
    loggers: dict[str, _Logger] = {}
    log4j = SimpleNamespace(LogManager=SimpleNamespace(getLogger=lambda n: loggers.setdefault(n, _Logger(calls, n))),
                            Level=SimpleNamespace(OFF="OFF", ERROR="ERROR"))
    return SimpleNamespace(_jvm=SimpleNamespace(org=SimpleNamespace(apache=SimpleNamespace(
        logging=SimpleNamespace(log4j=log4j)))))


def test_task_failure_loggers_are_off_inside_and_restored_after(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SAFEBUNNY_LOG_LEVEL", raising=False)
    calls: list = []
    spark = _spark(calls)
    monkeypatch.setattr(spark_logs, "QUIET_GRACE_S", 0.3)
    with spark_logs.quiet_task_failures(spark):
        with spark_logs.quiet_task_failures(spark):  # nested: one switch
            assert calls == [(name, "OFF") for name in spark_logs.TASK_FAILURE_LOGGERS]
    # a failed job's other tasks are logged a moment after its error: still off for the grace period
    assert calls == [(name, "OFF") for name in spark_logs.TASK_FAILURE_LOGGERS]
    with spark_logs.quiet_task_failures(spark):  # the next batch within the grace period: no switching
        pass
    assert len(calls) == 2
    deadline = time.monotonic() + 5
    while len(calls) < 4 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert calls[2:] == [(name, "WARN") for name in spark_logs.TASK_FAILURE_LOGGERS]


@pytest.mark.parametrize("level", ["INFO", "debug"])
def test_safebunny_log_level_info_leaves_spark_alone(monkeypatch: pytest.MonkeyPatch, level: str) -> None:
    monkeypatch.setenv("SAFEBUNNY_LOG_LEVEL", level)
    monkeypatch.setattr(spark_logs, "_noted", False)
    calls: list = []
    spark = _spark(calls)
    with spark_logs.quiet_task_failures(spark):
        pass
    spark_logs.note_streaming_started(spark)
    assert calls == []


def test_the_streaming_note_is_turned_down_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SAFEBUNNY_LOG_LEVEL", raising=False)
    monkeypatch.setattr(spark_logs, "_noted", False)
    calls: list = []
    spark = _spark(calls)
    spark_logs.note_streaming_started(spark)
    spark_logs.note_streaming_started(spark)
    assert calls == [(spark_logs.STREAMING_NOTE_LOGGER, "ERROR")]


def test_a_session_without_a_jvm_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SAFEBUNNY_LOG_LEVEL", raising=False)
    with spark_logs.quiet_task_failures(SimpleNamespace()):  # Spark Connect: no _jvm, no sparkContext
        pass


def test_query_context_records_are_dropped_in_the_steps_thread_only(monkeypatch: pytest.MonkeyPatch) -> None:
    import logging
    import threading

    monkeypatch.delenv("SAFEBUNNY_LOG_LEVEL", raising=False)
    seen: list[str] = []

    class _Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    logger = spark_logs._pyspark_logger("DataFrameQueryContextLogger")
    handler = _Keep()
    logger.addHandler(handler)
    try:
        with spark_logs.quiet_query_context():
            logger.error("in the step")
            other = threading.Thread(target=lambda: logger.error("another thread"))
            other.start()
            other.join()
        logger.error("after")
    finally:
        logger.removeHandler(handler)
    assert seen == ["another thread", "after"]
