"""``saga.run(spark, trigger="availableNow")``: RunningSaga's supervisor runs each step in rounds of availableNow
queries. Pure logic: test doubles stand for the steps' queries (the Connect e2e test runs real ones)."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from safebunny.options.connection import ConnectionSettings
from safebunny.saga.define.config import SagaConfig, SagaLayout
from safebunny.saga.run import runner, worker_starts
from safebunny.saga.run.queries import is_available_now
from safebunny.saga.run.runner import RunningSaga


class _Query:
    """An availableNow query that has already ended, having read ``rows`` rows or failed with ``error``."""

    isActive = False  # noqa: N815

    def __init__(self, rows: int, error: BaseException | None = None) -> None:
        self.recentProgress = [{"numInputRows": rows}, {"numInputRows": 0}]  # noqa: N815
        self.error = error

    def exception(self) -> BaseException | None:
        return self.error

    def stop(self) -> None:
        pass


def _wait(condition, timeout: float = 15.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list:  # type: ignore[type-arg]
    """Every start_query call as (label, trigger); what each query does comes from ``script``."""
    calls: list = []  # type: ignore[type-arg]
    script = {"busy": lambda n: _Query(5), "idle": lambda n: _Query(0),
              "broken": lambda n: _Query(0, RuntimeError("broker away") if n == 0 else None)}

    def start(spark, saga, step, trigger):  # type: ignore[no-untyped-def]
        n = sum(1 for label, _ in calls if label == step.unit_label)
        calls.append((step.unit_label, trigger))
        return script[step.unit_label](n)

    monkeypatch.setattr(runner, "start_query", start)
    monkeypatch.setattr(runner, "activate", lambda spark: None)
    return calls


def _saga(*labels: str) -> SimpleNamespace:
    steps = [SimpleNamespace(unit_label=label, shard=None) for label in labels]
    return SimpleNamespace(config=SagaConfig("orders", ConnectionSettings("amqp://localhost"),
                                                  SagaLayout("/tmp/safebunny-unit-rounds")),
                           units=lambda: steps)


def test_available_now_is_named_in_any_spelling() -> None:
    assert all(is_available_now(t) for t in ("availableNow", "available_now", "AVAILABLE-NOW"))
    assert not any(is_available_now(t) for t in (None, "1 second", "available"))


def test_each_step_starts_its_next_round_as_the_last_ends_idle_ones_later(started: list) -> None:  # type: ignore[type-arg]
    running = RunningSaga(None, _saga("busy", "idle"), "availableNow")
    try:
        _wait(lambda: running.rounds.get("busy", 0) >= 3)
        assert running.rounds.get("idle", 0) <= 2, "a round that read nothing waits before the next"
    finally:
        running.stop()
    assert {trigger for _, trigger in started} == {None}, "every round is an availableNow query"
    assert running.restarts == {"busy": 0, "idle": 0} and running.errors == {}, "an ended round is no failure"


def test_a_failed_round_is_restarted_with_backoff_and_recorded(started: list) -> None:  # type: ignore[type-arg]
    running = RunningSaga(None, _saga("broken"), "availableNow")
    try:
        _wait(lambda: running.rounds.get("broken", 0) >= 1)
    finally:
        running.stop()
    assert running.restarts["broken"] == 1 and "broker away" in str(running.errors["broken"])
    assert running.given_up == set()


def test_a_processing_time_trigger_still_runs_queries_until_stopped(started: list) -> None:  # type: ignore[type-arg]
    running = RunningSaga(None, _saga("busy"), "1 second")
    running.stop()
    assert started == [("busy", "1 second")] and not running.in_rounds


def test_steps_whose_python_process_did_not_start_start_again_one_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """Three steps' first queries fail as a loaded machine makes them (Spark's Python process missed its 10 s to
    connect back): they start again one at a time, worker_starts.STAGGER_S apart, and the misses are not failures."""
    started_at: dict[str, list[float]] = {}

    def start(spark, saga, step, trigger):  # type: ignore[no-untyped-def]
        times = started_at.setdefault(step.unit_label, [])
        times.append(time.monotonic())
        if len(times) == 1:
            return _Query(0, RuntimeError("org.apache.spark.SparkException: Python worker failed to connect back."))
        return SimpleNamespace(isActive=True, stop=lambda: None, exception=lambda: None)

    monkeypatch.setattr(runner, "start_query", start)
    monkeypatch.setattr(runner, "activate", lambda spark: None)
    monkeypatch.setattr(worker_starts, "WAIT_S", 0.2)
    monkeypatch.setattr(worker_starts, "STAGGER_S", 1.5)
    running = RunningSaga(None, _saga("a", "b", "c"), "1 second")
    try:
        _wait(lambda: all(len(t) == 2 for t in started_at.values()) and len(started_at) == 3)
    finally:
        running.stop()
    again = sorted(times[1] for times in started_at.values())
    assert all(later - earlier >= 1.4 for earlier, later in zip(again, again[1:], strict=False)), again
    assert running.failing == {"a": 0, "b": 0, "c": 0}, "a query that never started is not the step's failure"
    assert running.restarts == {"a": 1, "b": 1, "c": 1}
