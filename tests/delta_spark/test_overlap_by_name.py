"""The by-name fence forced (issue 47, item 3): two driver processes run one step whose inbox, append table and
merge table are given by name (each driver its own catalog on the same Delta tables, as two clusters). Driver a's
first batch stalls mid-batch (after its append's commit, or just before it, planned); its consumer
connection is closed, so the broker gives the queue and a's unacked messages to driver b, which applies them; then
a resumes its stale batch.
Its commits carry the step's lock at the version a read before b committed, so Delta skips or refuses them and a
plans again: the ledger holds each order once and the merge inserted each once and updated none."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "e2e"))

from test_saga_drivers import _close_active_consumers, _full_log, _log, _stop  # noqa: E402

from helpers import publish_numbered, wait_until  # noqa: E402

HERE = Path(__file__).parent
ORDERS = 45


def _driver(uri, queue, workdir, driver, **env):
    environ = {k: v for k, v in os.environ.items() if not k.startswith("SAFEBUNNY_STALL")}
    environ.update(env)
    out = open(workdir / f"driver-{driver}.log", "w")  # noqa: SIM115 - the process writes it until it ends
    return subprocess.Popen([sys.executable, str(HERE / "overlap_driver.py"), uri, queue, str(workdir), driver],
                            env=environ, cwd=str(workdir), stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def _create_tables(spark, workdir):
    """The three tables at their paths (the drivers name them; a CREATE by both at once would race)."""
    tables = workdir / "tables"
    spark.sql(f"CREATE TABLE delta.`{tables / 'inbox'}` (node STRING, messageId STRING, correlationId STRING, "
              "causationId STRING, type STRING, epoch STRING, batchId BIGINT, status STRING, reason STRING, "
              "attempts INT, emitted ARRAY<STRING>, processedAt TIMESTAMP, processedDate STRING) USING DELTA "
              "PARTITIONED BY (node, processedDate)")
    for table in ("ledger", "reservations"):
        spark.sql(f"CREATE TABLE delta.`{tables / table}` (messageId STRING, orderId STRING) USING DELTA")
    return tables


# after its append's commit (its merge is stale); or with its append planned and only its commit left
@pytest.mark.parametrize("stall_at", ["step.after_one_effect", "step.before_one_effect"])
def test_a_driver_stalled_mid_batch_on_tables_by_name_applies_nothing_twice(spark, broker, amqp_uri, make_queue,
                                                                             tmp_path, stall_at):
    if broker.ctl is None:
        pytest.skip("closing a connection needs rabbitmqctl for the test broker")
    queue = make_queue(arguments={"x-single-active-consumer": True})
    tables = _create_tables(spark, tmp_path)
    stall = tmp_path / "stall-a"
    stall.mkdir()
    first = second = None
    try:
        first = _driver(amqp_uri, queue, tmp_path, "a", SAFEBUNNY_STALL_AT=stall_at, SAFEBUNNY_STALL_DIR=str(stall))
        wait_until(lambda: "RUNNING" in _full_log(tmp_path, "a"), timeout=240, every=1, what="driver a running")
        second = _driver(amqp_uri, queue, tmp_path, "b")
        wait_until(lambda: "RUNNING" in _full_log(tmp_path, "b"), timeout=240, every=1, what="driver b running")
        time.sleep(5)  # b's consumer attaches at its first trigger, waiting behind a's (single active consumer)
        publish_numbered(amqp_uri, queue, ORDERS, body=lambda i: json.dumps({"orderId": f"o{i}"}).encode())
        wait_until(lambda: (stall / "stalled").exists(), timeout=240, every=0.5, what="driver a stalled mid-batch")
        assert _close_active_consumers(broker, [queue]), "driver a's consumer found"
        want = sorted(f"o{i}" for i in range(ORDERS))

        def reserved():
            return sorted({r.orderId for r in spark.read.format("delta").load(str(tables / "reservations")).collect()})

        wait_until(lambda: reserved() == want, timeout=240, every=1, what="driver b reserved every order")

        def merges():
            return [r.operationMetrics for r in spark.sql(f"DESCRIBE HISTORY delta.`{tables / 'reservations'}`")
                    .collect() if r.operation == "MERGE"]

        def ledger():
            return [r.orderId for r in spark.read.format("delta").load(str(tables / "ledger")).collect()]

        (stall / "release").touch()
        # a's batch ends by leaving its ids out, or (were it not fenced) by applying them a second time
        wait_until(lambda: any(w in _full_log(tmp_path, "a") for w in ("left out", "QUERY-EXCEPTION"))
                   or len(ledger()) > ORDERS or any(int(m["numTargetRowsUpdated"]) for m in merges()),
                   timeout=180, every=1, what="driver a's stalled batch to end")
        time.sleep(5)  # a second copy would land within a few triggers
        assert sorted(ledger()) == want, "each order once in the ledger:\n" + _log(tmp_path, "a")
        merged = merges()
        assert sum(int(m["numTargetRowsInserted"]) for m in merged) == ORDERS
        assert sum(int(m["numTargetRowsUpdated"]) for m in merged) == 0, "no order merged twice: " + str(merged)
        assert "planning again" in _full_log(tmp_path, "a"), "a's stale commit was refused: " + _log(tmp_path, "a")
        assert first.poll() is None and second.poll() is None, _log(tmp_path, "a") + _log(tmp_path, "b")
    finally:
        _stop(tmp_path, [(first, "a"), (second, "b")])
