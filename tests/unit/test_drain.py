"""``drain``'s rounds: a failed step starts again from its checkpoint in the next round, and after
``restarts`` failures of one step in a row its error is raised. Pure logic: test doubles stand for the
saga's counters and the steps' queries (the e2e saga tests drain real queries)."""

from __future__ import annotations

import logging
import os
import time
from types import SimpleNamespace

import pytest

import safebunny.saga.run.drain as draining
from safebunny.options.connection import ConnectionSettings
from safebunny.saga.define.config import SagaConfig, SagaLayout
from safebunny.saga.run import runner, worker_starts
from safebunny.saga.run.drain import drain

CONFIG = SagaConfig("orders", ConnectionSettings("amqp://localhost"), SagaLayout("/tmp/safebunny-unit-drain"))


@pytest.fixture(autouse=True)
def _progress(monkeypatch):
    """The doubles count what moved and what waits themselves (the real ones read reports and the broker)."""
    monkeypatch.setattr(draining, "moved_so_far", lambda saga: saga._moved())
    monkeypatch.setattr(draining, "waiting", lambda saga: saga._waiting())
    monkeypatch.setattr(draining, "idle", lambda saga: saga._waiting() == 0)


def _step(label: str) -> SimpleNamespace:
    """``stock.OrderPlaced`` (fed by the shop) emits ``StockReserved`` to ``shipping.StockReserved``."""
    node, consumes = label.split(".")
    return SimpleNamespace(label=label, unit_label=label, node=node, consumes=consumes,
                           from_node="stock" if consumes == "StockReserved" else "shop",
                           produces=("StockReserved",) if node == "stock" else ())


class _Saga:
    """Two steps; each successful query moves what its script says; nothing waits once all moved."""

    config = CONFIG

    def __init__(self, scripts: dict[str, list]) -> None:  # type: ignore[type-arg]
        self.steps = [_step(label) for label in scripts]
        self.await_files: dict[str, list] = {label: [] for label in scripts}  # type: ignore[type-arg]
        self.scripts = scripts  # label -> per start: an exception (the query fails) or messages moved
        self.started: list[str] = []
        self.events: list[str] = []  # "start <label>" and "end <label>", in order
        self.moved_so_far = 0

    def units(self) -> list:  # type: ignore[type-arg]
        return self.steps

    def _moved(self) -> int:
        return self.moved_so_far

    def _waiting(self) -> int:
        return sum(1 for script in self.scripts.values() if script)

    def start(self, spark, saga, step, trigger, await_file=None):  # type: ignore[no-untyped-def]
        assert trigger is None  # availableNow
        self.started.append(step.label)
        self.await_files[step.label].append(await_file)
        self.events.append(f"start {step.label}")
        outcome = self.scripts[step.label].pop(0) if self.scripts[step.label] else 0
        error = outcome if isinstance(outcome, BaseException) else None
        if error is None:
            self.moved_so_far += outcome
        def await_termination() -> None:
            # the source ends a run that awaits a file only once the file is there
            assert await_file is None or os.path.exists(await_file), f"{step.label} ended before its file"
            self.events.append(f"end {step.label}")
            if error is not None:
                raise error  # as PySpark's awaitTermination does for a failed query

        return SimpleNamespace(awaitTermination=await_termination, exception=lambda: error)


def test_a_step_failing_once_starts_again_and_the_drain_ends(caplog):
    saga = _Saga({"stock.OrderPlaced": [RuntimeError("the broker closed the connection"), 5],
                  "shipping.StockReserved": [5]})
    with caplog.at_level(logging.WARNING, logger="safebunny.saga"):
        rounds = drain(None, saga, timeout_s=30, start=saga.start)
    assert saga.started.count("stock.OrderPlaced") == 2  # failed, moved 5; then nothing waits
    assert rounds == 2
    assert "step stock.OrderPlaced failed (the broker closed the connection)" in caplog.text
    assert "restart 1 of 2" in caplog.text


def test_a_step_failing_more_times_in_a_row_than_restarts_raises_its_error():
    boom = RuntimeError("the broker refused the login")
    saga = _Saga({"stock.OrderPlaced": [boom, boom, boom, 5], "shipping.StockReserved": [1]})
    with pytest.raises(RuntimeError) as err:
        drain(None, saga, timeout_s=30, restarts=2, start=saga.start)
    assert err.value is boom
    assert saga.started.count("stock.OrderPlaced") == 3
    assert saga.started.count("shipping.StockReserved") == 3  # the other step's queries ran to their end


def test_failures_count_in_a_row_only():
    a, b = RuntimeError("a"), RuntimeError("b")
    saga = _Saga({"stock.OrderPlaced": [a, 1, b, 1], "shipping.StockReserved": [1]})
    assert drain(None, saga, timeout_s=30, restarts=1, start=saga.start) == 4


def test_no_restarts_raises_the_first_failure():
    boom = RuntimeError("boom")
    saga = _Saga({"stock.OrderPlaced": [boom], "shipping.StockReserved": []})
    with pytest.raises(RuntimeError):
        drain(None, saga, timeout_s=30, restarts=0, start=saga.start)
    with pytest.raises(ValueError, match="restarts must be >= 0, but got -1"):
        drain(None, saga, restarts=-1, start=saga.start)


def test_the_round_after_a_failure_runs_the_steps_side_by_side_again():
    saga = _Saga({"stock.OrderPlaced": [RuntimeError("the broker closed the connection"), 5],
                  "shipping.StockReserved": [5]})
    drain(None, saga, timeout_s=30, start=saga.start)
    a, b = "stock.OrderPlaced", "shipping.StockReserved"
    assert saga.events == [f"start {a}", f"start {b}", f"end {a}", f"end {b}"] * 2  # both start before either ends


def test_a_step_fed_by_another_reads_until_the_feeding_step_ended_and_its_file_goes_after_the_round():
    """``shipping`` (a later layer) gets the round's file, written once ``stock`` has ended (the double asserts
    it is there when ``shipping`` ends); the entry step gets none; the files are gone after the drain."""
    saga = _Saga({"stock.OrderPlaced": [5], "shipping.StockReserved": [5]})
    assert drain(None, saga, timeout_s=30, start=saga.start) == 1
    assert saga.await_files["stock.OrderPlaced"] == [None]
    [gate] = saga.await_files["shipping.StockReserved"]
    assert gate is not None and gate.startswith(CONFIG.layout.root) and not os.path.exists(gate)
    assert draining.layers(saga) == {"stock.OrderPlaced": 1, "shipping.StockReserved": 2}  # the shop is layer 0


def test_a_drain_interrupted_while_it_waits_still_writes_its_files():
    """Interrupted while it waits for ``stock`` (Ctrl-C in a notebook), the drain must not leave ``shipping``'s
    query waiting for its file."""
    saga = _Saga({"stock.OrderPlaced": [5], "shipping.StockReserved": [5]})

    def start(spark, s, step, trigger, await_file=None):  # type: ignore[no-untyped-def]
        query = saga.start(spark, s, step, trigger, await_file)
        if step.label == "stock.OrderPlaced":
            query.awaitTermination = lambda: (_ for _ in ()).throw(KeyboardInterrupt())
        return query

    with pytest.raises(KeyboardInterrupt):
        drain(None, saga, timeout_s=30, start=start)
    [gate] = saga.await_files["shipping.StockReserved"]
    assert os.path.exists(gate)
    os.remove(gate)


_RACE = ("[STREAM_FAILED] Query [id = 1] terminated with exception: Job aborted due to stage failure: Task "
         "serialization failed: java.lang.IllegalStateException: Illegal size 1 of collection, expected 2\n"
         "java.lang.IllegalStateException: Illegal size 1 of collection, expected 2\n\tat scala.collection.generic."
         "DefaultSerializationProxy.writeObject(DefaultSerializationProxy.scala:42)")


def test_a_step_failing_in_task_serialisation_on_a_resized_collection_is_named_as_such(caplog):
    saga = _Saga({"stock.OrderPlaced": [RuntimeError(_RACE), 5], "shipping.StockReserved": [5]})
    with caplog.at_level(logging.WARNING, logger="safebunny.saga"):
        drain(None, saga, timeout_s=30, start=saga.start)
    assert "step stock.OrderPlaced failed ([STREAM_FAILED]" in caplog.text and "restart 1 of 2" in caplog.text
    assert ("step stock.OrderPlaced: Spark could not serialise a task because a collection in it changed size"
            in caplog.text)
    assert "safebunny.spark.first_stream" in caplog.text


def test_other_failures_get_no_serialisation_line(caplog):
    saga = _Saga({"stock.OrderPlaced": [RuntimeError("Task serialization failed: java.io.NotSerializableException: x"),
                                        5], "shipping.StockReserved": [5]})
    with caplog.at_level(logging.WARNING, logger="safebunny.saga"):
        drain(None, saga, timeout_s=30, start=saga.start)
    assert "restart 1 of 2" in caplog.text and "could not serialise a task" not in caplog.text


def test_a_query_that_fails_to_start_is_a_failed_step_started_again_next_round():
    saga = _Saga({"stock.OrderPlaced": [5], "shipping.StockReserved": [5]})
    refused = RuntimeError("Python worker failed to connect back.")
    calls = {"n": 0}

    def start(spark, s, step, trigger, *await_file):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if calls["n"] == 1:
            raise refused
        return saga.start(spark, s, step, trigger, *await_file)

    assert drain(None, saga, timeout_s=30, start=start) == 2
    assert saga.started.count("stock.OrderPlaced") == 1 and calls["n"] == 4  # refused, then started once
    with pytest.raises(RuntimeError) as err:
        drain(None, _Saga({"stock.OrderPlaced": [5]}), timeout_s=30, restarts=1,
              start=lambda *a: (_ for _ in ()).throw(RuntimeError("no route to the cluster")))
    assert str(err.value) == "no route to the cluster"


def test_a_python_process_that_did_not_start_in_time_is_not_a_restart_but_is_bounded(monkeypatch, caplog):
    """Spark's fixed 10 s for its Python process to connect back, missed on a loaded machine: the query never ran,
    so it does not use the step's restarts (``restarts=0`` still drains); too many in a row still raise."""
    monkeypatch.setattr(worker_starts, "WAIT_S", 0.0)
    refused = RuntimeError("Python worker failed to connect back.")
    saga = _Saga({"stock.OrderPlaced": [refused, refused, refused, 5]})
    with caplog.at_level(logging.WARNING, logger="safebunny.saga"):
        assert drain(None, saga, timeout_s=30, restarts=0, start=saga.start) == 4
    assert saga.started.count("stock.OrderPlaced") == 4
    assert "did not connect back in time" in caplog.text and "(3 of 6)" in caplog.text
    calls = {"n": 0}

    def never(*args):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        raise refused

    with pytest.raises(RuntimeError) as err:
        drain(None, _Saga({"stock.OrderPlaced": [5]}), timeout_s=30, restarts=0, start=never)
    assert err.value is refused and calls["n"] == worker_starts.TRIES + 1


def test_a_running_saga_restarts_a_query_that_failed_to_start(monkeypatch):
    import threading


    started = threading.Event()
    calls: list[str] = []

    def start_query(spark, saga, step, trigger):  # type: ignore[no-untyped-def]
        calls.append(step.label)
        if len(calls) == 1:
            raise RuntimeError("Python worker failed to connect back.")
        started.set()
        return SimpleNamespace(isActive=True, stop=lambda: None, exception=lambda: None)

    monkeypatch.setattr(runner, "start_query", start_query)
    monkeypatch.setattr(runner, "activate", lambda spark: spark)
    steps = [SimpleNamespace(label="stock.OrderPlaced", unit_label="stock.OrderPlaced")]
    saga = SimpleNamespace(config=CONFIG, steps=steps, units=lambda: steps)
    running = runner.RunningSaga(None, saga, "1 second")
    try:
        assert started.wait(20), "the supervisor started the query again"
        assert calls == ["stock.OrderPlaced", "stock.OrderPlaced"] and running.restarts["stock.OrderPlaced"] == 1
    finally:
        running.stop()


def test_a_restarted_query_that_runs_well_resets_its_backoff(monkeypatch):
    """The backoff doubles with failures in a row only: once a restarted query has stayed up for HEALTHY_S, the
    step's next failure waits one second again (it did not reset before: a long run's backoff stayed at 60 s)."""

    queries: list[SimpleNamespace] = []

    def start_query(spark, saga, step, trigger):  # type: ignore[no-untyped-def]
        failed = not queries  # the first query has failed by the supervisor's first look; the second runs
        queries.append(SimpleNamespace(isActive=not failed, stop=lambda: None,
                                       exception=lambda f=failed: RuntimeError("broker away") if f else None))
        return queries[-1]

    monkeypatch.setattr(runner, "start_query", start_query)
    monkeypatch.setattr(runner, "activate", lambda spark: spark)
    monkeypatch.setattr(runner.RunningSaga, "HEALTHY_S", 0.5)
    steps = [SimpleNamespace(label="stock.OrderPlaced", unit_label="stock.OrderPlaced", shard=None)]
    saga = SimpleNamespace(config=CONFIG, steps=steps, units=lambda: steps)
    running = runner.RunningSaga(None, saga, "1 second")
    try:
        deadline = time.monotonic() + 20
        while len(queries) < 2:
            assert time.monotonic() < deadline, "the supervisor restarted the failed query"
            time.sleep(0.05)
        assert running.failing["stock.OrderPlaced"] == 1, "one failure in a row: the next backoff would be 2 s"
        while running.failing["stock.OrderPlaced"]:
            assert time.monotonic() < deadline, "a query up for HEALTHY_S ends the failure streak"
            time.sleep(0.05)
        assert running.restarts["stock.OrderPlaced"] == 1, "the total of restarts is kept"
    finally:
        running.stop()


# what a StreamingQueryException's message holds when the source's reader failed (shortened)
SPARK_TEXT = """[STREAM_FAILED] Query [id = 6e87cd11, runId = 826d8d13] terminated with exception: \
[PYTHON_STREAMING_DATA_SOURCE_RUNTIME_ERROR] Failed when Python streaming data source perform \
prepareForTriggerAvailableNow: Traceback (most recent call last):
  File "/site-packages/safebunny/amqp/connection.py", line 151, in open_blocking
    raise broker_error(exc, StreamEndpoint.from_uri(uri), action) from None
safebunny.errors.QueueNotFoundError: Queue 'orders' does not exist in vhost '/' at 127.0.0.1:5672. Declare it.
 SQLSTATE: 38000 SQLSTATE: XXKST
=== Streaming Query ===
Current State: INITIALIZING"""


def test_a_raised_step_error_is_safebunnys_own_with_sparks_as_its_cause(caplog):
    from safebunny.errors import QueueNotFoundError

    spark_error = RuntimeError(SPARK_TEXT)
    saga = _Saga({"stock.OrderPlaced": [spark_error, spark_error], "shipping.StockReserved": [1]})
    with caplog.at_level(logging.WARNING, logger="safebunny.saga"):
        with pytest.raises(QueueNotFoundError) as err:
            drain(None, saga, timeout_s=30, restarts=1, start=saga.start)
    assert str(err.value) == "Queue 'orders' does not exist in vhost '/' at 127.0.0.1:5672. Declare it."
    assert err.value.__cause__ is spark_error
    assert "failed (QueueNotFoundError: Queue 'orders' does not exist" in caplog.text  # one line, not the trace


def test_a_plan_error_is_raised_at_once_without_a_restart(caplog):
    from safebunny.errors import SafeBunnyPlanError

    plan = RuntimeError("Traceback (most recent call last):\n  File \"x\", line 1\n"
                        "safebunny.errors.SafeBunnyPlanError: step stock.OrderPlaced: unknown column `qtyy`")
    saga = _Saga({"stock.OrderPlaced": [plan, 5], "shipping.StockReserved": [5]})
    with caplog.at_level(logging.WARNING, logger="safebunny.saga"), pytest.raises(SafeBunnyPlanError) as info:
        drain(None, saga, timeout_s=30, start=saga.start)
    assert saga.started.count("stock.OrderPlaced") == 1
    assert "unknown column `qtyy`" in str(info.value) and info.value.__cause__ is plan
    assert "starting it again" not in caplog.text
