"""A handler whose plan Spark refuses (an unknown column) fails ``drain`` and ``run`` once, with one line that
names the step, the column and what to do: a real broker, the shared SparkSession."""

from __future__ import annotations

import logging
import time
import uuid

import pytest
from pyspark.logger import PySparkLogger

import safebunny
from safebunny.errors import SafeBunnyPlanError


def _saga(uri, tmp):
    saga = safebunny.Saga(f"sbp-{uuid.uuid4().hex[:8]}", uri=uri, root=str(tmp / "saga"),
        settings=safebunny.SagaSettings(retry=safebunny.Retry(delays=("1s",)), batch_size=50))

    @saga.step("stock", consumes="OrderPlaced", from_node="orders", schema="orderId string, qty int")
    def reserve(orders, ctx):
        return safebunny.Outcome(effects=[safebunny.append(orders.select("messageId", "qtyy"), str(tmp / "out"))])

    return saga


def test_drain_raises_a_plan_error_once_naming_the_column_and_what_to_do(spark, amqp_uri, tmp_path, caplog):
    saga = _saga(amqp_uri, tmp_path)
    try:
        saga.start(spark.createDataFrame([("o1", 1)], "orderId string, qty int"), node="orders",
                   type="OrderPlaced", business_key="orderId")
        context: list[logging.LogRecord] = []
        keep = logging.Handler()
        keep.emit = context.append  # type: ignore[method-assign]
        PySparkLogger.getLogger("DataFrameQueryContextLogger").addHandler(keep)
        try:
            with caplog.at_level(logging.WARNING, logger="safebunny.saga"), pytest.raises(SafeBunnyPlanError) as info:
                saga.drain(spark, timeout=240)
        finally:
            PySparkLogger.getLogger("DataFrameQueryContextLogger").removeHandler(keep)
        assert context == []  # PySpark's JSON line with the JVM trace: our one line says it
        message = str(info.value)
        assert "\n" not in message
        assert "step stock.OrderPlaced" in message and "handler reserve" in message and "`qtyy`" in message
        assert "UNRESOLVED_COLUMN" in message and "fix the handler" in message
        assert "starting it again" not in caplog.text  # no restart for a plan error
    finally:
        safebunny.topology.delete(saga)


def test_runs_supervisor_does_not_restart_a_step_with_a_plan_error(spark, amqp_uri, tmp_path, caplog):
    saga = _saga(amqp_uri, tmp_path)
    try:
        saga.start(spark.createDataFrame([("o1", 1)], "orderId string, qty int"), node="orders",
                   type="OrderPlaced", business_key="orderId")
        with caplog.at_level(logging.ERROR, logger="safebunny.saga"):
            running = saga.run(spark, trigger="1 second")
            try:
                deadline = time.monotonic() + 240
                while not running.given_up and time.monotonic() < deadline:
                    time.sleep(0.5)
                time.sleep(3)  # a restart would have come after 1 s
            finally:
                running.stop()
        assert running.given_up == {"stock.OrderPlaced"}
        assert running.restarts["stock.OrderPlaced"] == 0
        assert isinstance(running.errors["stock.OrderPlaced"], SafeBunnyPlanError)
        lines = [r.getMessage() for r in caplog.records if "stock.OrderPlaced" in r.getMessage()]
        assert len(lines) == 1 and "is not restarted" in lines[0] and "`qtyy`" in lines[0], lines
    finally:
        safebunny.topology.delete(saga)
