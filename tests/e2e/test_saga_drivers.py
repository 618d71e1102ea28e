"""Two driver processes run one sharded saga (same name and root).

- A standby: the driver holding every shard is killed in the middle of a batch (after one Delta effect
  or after its publish; always before its inbox marker). The other takes the shards over (the
  broker's single active consumer) and every effect ends exactly once, with no shard unheld.
- Two drivers started at once: the broker gives each shard to whichever driver attaches first (split 3/1 in
  one run, all to one in another; the test prints it), both may write the same Delta tables and inbox, and
  every effect still ends exactly once, every shard held by one consumer."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from helpers import wait_until
from safebunny.delta.delta_rs import DeltaRsTarget
from safebunny.saga.define import topology

pytestmark = pytest.mark.xdist_group("drivers")  # tests/xdist_units.py: drivers of their own

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from shard_driver import SHIPPING_SHARDS, STOCK_SHARDS, define  # noqa: E402

ORDERS = 90


def _driver(uri, name, workdir, driver, crash_at=None, fail_at=None, go=None, checkpoints=None, cwd=HERE, **more):
    env = {k: v for k, v in os.environ.items() if k not in ("SAFEBUNNY_CRASH_AT", "SAFEBUNNY_FAIL_AT",
                                                            "SAFEBUNNY_STALL_AT")}
    env.update(more)
    if checkpoints:
        env["SAFEBUNNY_TEST_CHECKPOINTS"] = str(checkpoints)
    if go:
        env["SAFEBUNNY_TEST_GO"] = str(go)
    if crash_at:
        env["SAFEBUNNY_CRASH_AT"] = crash_at
    if fail_at:
        env["SAFEBUNNY_FAIL_AT"] = fail_at
    out = open(workdir / f"driver-{driver}.log", "w")  # noqa: SIM115 - the process writes it until it ends
    return subprocess.Popen([sys.executable, str(HERE / "shard_driver.py"), uri, name, str(workdir), driver],
                            env=env, cwd=str(cwd), stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def _full_log(workdir, driver):
    return (workdir / f"driver-{driver}.log").read_text(errors="replace")


def _log(workdir, driver):
    """The log's tail without Java stack frames, for a failure's message (search _full_log: at load the tail can
    be all Spark's worker-start tracebacks)."""
    text = _full_log(workdir, driver)
    return "\n".join(ln for ln in text.splitlines() if not ln.strip().startswith("at "))[-4000:]


def _order_ids(path):
    table = DeltaRsTarget(str(path)).read()
    return [] if table is None else table.column("orderId").to_pylist()


def _consumers(saga, queues):
    return [d[1] if d else 0 for d in topology.depths(saga, queues).values()]


def _shard_queues(saga):
    return ([topology.consumer_queue(saga, "stock", "OrderPlaced", i) for i in range(STOCK_SHARDS)]
            + [topology.consumer_queue(saga, "shipping", "StockReserved", i) for i in range(SHIPPING_SHARDS)])


def _wait_shipped(saga, tmp_path, shards, driver, orders=ORDERS):
    try:
        wait_until(lambda: len(_order_ids(tmp_path / "shipments")) >= orders, timeout=480, every=1,
                   what=f"driver {driver} to finish the saga")
    except AssertionError as exc:
        queues = [*shards, topology.unrouted_name(saga)]
        raise AssertionError(f"{exc}: {len(_order_ids(tmp_path / 'shipments'))} shipped; queues (ready, "
                             f"consumers): {topology.depths(saga, queues)}; driver {driver}'s log:\n"
                             f"{_log(tmp_path, driver)}") from None


def _stop(tmp_path, processes):
    """End the drivers once the test has checked what it checks: a kill of each process group (Python workers
    included), not a graceful stop, which would only cost each driver's query and session shutdown."""
    for process, _driver in processes:
        if process is not None and process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=60)


def _assert_each_order_once_and_every_shard_held(saga, tmp_path, shards, orders, drivers):
    """Every order reserved and shipped once, every shard queue empty and held by one consumer, every driver
    in ``drivers`` (``(process, name)``) alive."""
    time.sleep(3)  # a second copy would land within a few triggers
    want = sorted(f"o{i}" for i in range(orders))
    assert sorted(_order_ids(tmp_path / "reservations")) == want
    assert sorted(_order_ids(tmp_path / "shipments")) == want
    depths = topology.depths(saga, shards)
    assert [d[0] for d in depths.values()] == [0] * len(shards)
    assert [d[1] for d in depths.values()] == [1] * len(shards), "every shard held by one consumer"
    for process, d in drivers:
        assert process.poll() is None, _log(tmp_path, d)


def _standby_then_orders(spark, uri, name, workdir, saga, shards, orders=ORDERS, **more):
    """Start driver b's session beside driver a's (started just before); once a is every shard's active
    consumer, let b run the saga as the standby, wait for its queries, then start the orders; returns b's
    process."""
    go = workdir / "go-b"
    second = _driver(uri, name, workdir, "b", go=go, **more)
    wait_until(lambda: min(_consumers(saga, shards)) >= 1, timeout=180, every=1,
               what="driver a attached to every shard")
    go.touch()
    # a waiting consumer of a single-active-consumer queue is not in the queue's consumer count: b's queries have
    # started, and their consumers attach at their first trigger
    wait_until(lambda: "RUNNING" in _full_log(workdir, "b"), timeout=180, every=1, what="driver b running")
    time.sleep(5)
    frame = spark.createDataFrame([(f"o{i}",) for i in range(orders)], "orderId string")
    saga.start(frame, node="orders", type="OrderPlaced", business_key="orderId")
    return second


# after one of two effects' tables, after the publish: each leaves the other driver a different half-done batch of
# another epoch (claims, app transactions, inbox; DESIGN.md). A batch killed after its claim with no effect applied
# is the same orphan for another driver as for a new checkpoint: test_step_crash's new-checkpoint matrix has it.
@pytest.mark.parametrize("crash_at", ["step.after_one_effect:3", "step.after_publish:3"])
def test_a_standby_driver_takes_over_the_shards_of_a_killed_one_exactly_once(spark, amqp_uri, tmp_path, crash_at):
    name = f"sbt-drivers-{uuid.uuid4().hex[:8]}"
    saga = define(amqp_uri, name, str(tmp_path), None)  # the shape, to publish and inspect
    shards = _shard_queues(saga)
    first = second = None
    try:
        # a is killed in its third batch with effects, before that batch's inbox marker
        first = _driver(amqp_uri, name, tmp_path, "a", crash_at=crash_at)
        second = _standby_then_orders(spark, amqp_uri, name, tmp_path, saga, shards)
        first.wait(timeout=240)
        died = time.monotonic()
        assert first.returncode == -signal.SIGKILL, _log(tmp_path, "a")
        assert _order_ids(tmp_path / "reservations"), "driver a applied effects before it died"
        want = sorted(f"o{i}" for i in range(ORDERS))
        _wait_shipped(saga, tmp_path, shards, "b")
        print(f"driver b finished the orders {time.monotonic() - died:.1f} s after driver a died")
        time.sleep(3)  # a second copy would land within a few triggers
        assert sorted(_order_ids(tmp_path / "reservations")) == want  # a's effects were not applied again
        assert sorted(_order_ids(tmp_path / "shipments")) == want
        depths = topology.depths(saga, shards)
        assert [d[0] for d in depths.values()] == [0] * len(shards)
        assert [d[1] for d in depths.values()] == [1] * len(shards), "every shard held by driver b"
        assert second.poll() is None, _log(tmp_path, "b")
        held = saga.shards()  # from this process: the counters each driver's batches recorded under the root
        assert [(s.step, s.shard, s.held, s.backlog) for s in held] == (
            [("stock.OrderPlaced", i, True, 0) for i in range(STOCK_SHARDS)]
            + [("shipping.StockReserved", i, True, 0) for i in range(SHIPPING_SHARDS)])
        assert {s.last_driver for s in held} <= {"a", "b"} and "b" in {s.last_driver for s in held}
    finally:
        _stop(tmp_path, [(first, "a"), (second, "b")])
        topology.delete(saga)


def test_a_failed_batch_replayed_beside_the_standby_that_got_its_messages_is_fenced(spark, amqp_uri, tmp_path):
    """Issue 35, case 3 with real drivers: driver a's third batch with effects fails after its claim (a storage
    error, say); its query stops, its consumer leaves and the broker gives the unacked messages to driver b, the
    standby; a's supervisor restarts a's query, which replays the batch from a's journal beside b. Both hold the
    same messages at once; every effect still ends exactly once (the fence), and a lives on."""
    name = f"sbt-drivers-{uuid.uuid4().hex[:8]}"
    saga = define(amqp_uri, name, str(tmp_path), None)
    shards = _shard_queues(saga)
    first = second = None
    try:
        first = _driver(amqp_uri, name, tmp_path, "a", fail_at="step.after_claim:3")
        second = _standby_then_orders(spark, amqp_uri, name, tmp_path, saga, shards)
        _wait_shipped(saga, tmp_path, shards, "b")
        assert "injected failure at crash point" in _full_log(tmp_path, "a"), "driver a's batch failed after its claim"
        _assert_each_order_once_and_every_shard_held(saga, tmp_path, shards, ORDERS,
                                                     [(first, "a"), (second, "b")])
    finally:
        _stop(tmp_path, [(first, "a"), (second, "b")])
        topology.delete(saga)


def test_two_drivers_started_at_once_with_a_checkpoints_home_keep_a_checkpoint_each_and_end_exactly_once(
        spark, amqp_uri, tmp_path):
    """Two drivers started at once: the broker gives each shard to whichever attaches first, and every order still
    ends reserved and shipped once, every shard held by one consumer. They share a checkpoints home
    (``Saga(driver=..., checkpoints=...)`` once put both drivers' queries on one checkpoint, one epoch for two
    processes): each driver's checkpoints are under ``<checkpoints>/<driver>``, each query with its own id there.
    Two drivers with the default checkpoints (under each driver's root) run side by side in the standby tests
    above and the balancing test below."""
    name = f"sbt-drivers-{uuid.uuid4().hex[:8]}"
    saga = define(amqp_uri, name, str(tmp_path), None)
    shards = _shard_queues(saga)
    home = tmp_path / "ck"
    drivers = []
    try:
        drivers = [(_driver(amqp_uri, name, tmp_path, d, checkpoints=home), d) for d in ("a", "b")]
        for _process, d in drivers:
            wait_until(lambda d=d: "RUNNING" in _full_log(tmp_path, d), timeout=180, every=1,
                       what=f"driver {d} running")
        # a loaded machine restarts queries whose Python worker was slow to start: give the shards time
        wait_until(lambda: min(_consumers(saga, shards)) >= 1, timeout=300, every=1, what="every shard held")
        orders = spark.createDataFrame([(f"o{i}",) for i in range(ORDERS)], "orderId string")
        saga.start(orders, node="orders", type="OrderPlaced", business_key="orderId")
        _wait_shipped(saga, tmp_path, shards, "a")
        _assert_each_order_once_and_every_shard_held(saga, tmp_path, shards, ORDERS, drivers)
        holders = {(s.step, s.shard): s.last_driver for s in saga.shards()}
        print(f"shards by driver: {holders}")
        assert set(holders.values()) <= {"a", "b"}
        assert sorted(p.name for p in home.iterdir()) == ["a", "b"], "one folder per driver, nothing shared"
        units = sorted(u.unit_label for u in saga.units())
        ids = {}
        for d in ("a", "b"):
            assert sorted(p.name for p in (home / d).iterdir()) == units
            ids[d] = {(home / d / u / "metadata").read_text() for u in units}
        assert not ids["a"] & ids["b"], "each driver's queries have query ids (epochs) of their own"
    finally:
        _stop(tmp_path, drivers)
        topology.delete(saga)


def test_a_driver_that_starts_later_gets_its_share_of_the_shards_and_every_effect_stays_exact(spark, amqp_uri,
                                                                                             tmp_path):
    """a holds every shard; b starts; a hands b its share (leases under the root decide which, a restart of a's
    query for the shard moves it) while orders keep coming, and every order ends reserved and shipped once."""
    name = f"sbt-drivers-{uuid.uuid4().hex[:8]}"
    saga = define(amqp_uri, name, str(tmp_path), None)
    shards = _shard_queues(saga)
    drivers: list = []
    sent = 0

    def send(n):
        nonlocal sent
        orders = spark.createDataFrame([(f"o{i}",) for i in range(sent, sent + n)], "orderId string")
        saga.start(orders, node="orders", type="OrderPlaced", business_key="orderId")
        sent += n

    def holders():
        return {(s.step, s.shard): s.holder for s in saga.shards()}

    try:
        drivers.append((_driver(amqp_uri, name, tmp_path, "a"), "a"))
        wait_until(lambda: min(_consumers(saga, shards)) >= 1, timeout=180, every=1,
                   what="driver a attached to every shard")
        send(40)
        wait_until(lambda: set(holders().values()) == {"a"}, timeout=120, every=1,
                   what="driver a holding every shard, by its lease")
        drivers.append((_driver(amqp_uri, name, tmp_path, "b"), "b"))
        wait_until(lambda: "RUNNING" in _full_log(tmp_path, "b"), timeout=180, every=1, what="driver b running")
        deadline = time.monotonic() + 150
        while set(holders().values()) != {"a", "b"}:  # orders keep coming: a holder shows itself by its batches
            assert time.monotonic() < deadline, (f"no shard moved to driver b: {holders()}; driver a's log:\n"
                                                 f"{_log(tmp_path, 'a')}")
            send(12)
            time.sleep(2)
        split = holders()
        print(f"shards by holder after balancing: {split}")
        wait_until(lambda: len(_order_ids(tmp_path / "shipments")) >= sent, timeout=480, every=1,
                   what=f"all {sent} orders shipped")
        _assert_each_order_once_and_every_shard_held(saga, tmp_path, shards, sent, drivers)
        rows = saga.shards()
        assert all(r.lease_age_seconds is not None and r.lease_age_seconds < 20 for r in rows if r.holder), rows
    finally:
        _stop(tmp_path, drivers)
        topology.delete(saga)


def _close_active_consumers(broker, queues):
    """Close the connection of each queue's active consumer (rabbitmqctl), as a network blip or a missed heartbeat
    would: the broker requeues its unacked messages and activates the waiting consumer (the standby)."""
    channels = {line.split("\t")[1] for line in broker.ctl("list_consumers", "-q", "queue_name", "channel_pid",
                                                          "active").splitlines()
                if line.split("\t")[0] in queues and line.split("\t")[-1] == "true"}
    connections = {pid: conn for pid, conn in (line.split("\t") for line in
                                               broker.ctl("list_channels", "-q", "pid", "connection").splitlines())}
    closed = {connections[c] for c in channels if c in connections}
    for conn in closed:
        broker.ctl("close_connection", conn, "safebunny test: the shard moves while its batch stalls")
    return closed


@pytest.mark.parametrize("stall_at", ["step.after_one_effect", "step.after_claim"])
def test_a_driver_stalled_mid_batch_while_its_shard_moved_applies_nothing_twice(spark, broker, amqp_uri, tmp_path,
                                                                               stall_at):
    """Issue 48, cases 1 and 4 with real drivers: stock writes two Delta tables (ledger, then reservations). Driver
    a's first stock batch stalls (after its first table's commit, or after its claim) and its consumer connection is
    closed (a reconnecting consumer: the broker moves the shard and a's unacked messages to driver b, the standby),
    b applies them (fencing a) and finishes every order; then a resumes its stale batch. Each table still holds each
    order once, and a's resumed batch says it left them out."""
    if broker.ctl is None:
        pytest.skip("closing a connection needs rabbitmqctl for the test broker")
    orders = 50
    name = f"sbt-drivers-{uuid.uuid4().hex[:8]}"
    saga = define(amqp_uri, name, str(tmp_path), None)
    shards = _shard_queues(saga)
    stock = [q for q in shards if ".stock." in q]
    stall = tmp_path / "stall-a"
    stall.mkdir()
    both = {"SAFEBUNNY_TEST_LEDGER": "1", "SAFEBUNNY_TEST_BALANCE": "0"}
    first = second = None
    try:
        first = _driver(amqp_uri, name, tmp_path, "a", SAFEBUNNY_STALL_AT=stall_at, SAFEBUNNY_STALL_DIR=str(stall),
                        **both)
        second = _standby_then_orders(spark, amqp_uri, name, tmp_path, saga, shards, orders, **both)
        wait_until(lambda: (stall / "stalled").exists(), timeout=480, every=0.5, what="driver a stalled mid-batch")
        assert _close_active_consumers(broker, stock), "driver a's stock consumers found"
        want = sorted(f"o{i}" for i in range(orders))
        wait_until(lambda: sorted(set(_order_ids(tmp_path / "reservations"))) == want, timeout=480, every=1,
                   what="driver b reserved every order")
        # b met a's stalled batch: a stall after a's first effect table fences a there; a stall after a's fenced
        # decisions (the first commit of a saga step's batch, before its claim names any effect table) has b follow
        # the decisions that landed, leaving them out of the decision table. Which comes first depends on which
        # of a's stock shards reaches the point first.
        met = _full_log(tmp_path, "b")
        assert "fencing" in met or "_decisions were applied by another batch" in met, "b met a's batch: " + _log(
            tmp_path, "b")
        (stall / "release").touch()
        wait_until(lambda: "applied by another batch" in _full_log(tmp_path, "a")
                   or len(_order_ids(tmp_path / "reservations")) > orders, timeout=120, every=1,
                   what="driver a's stalled batch to end")
        _wait_shipped(saga, tmp_path, shards, "b", orders)
        time.sleep(3)  # a second copy would land within a few triggers
        for table in ("ledger", "reservations", "shipments"):
            assert sorted(_order_ids(tmp_path / table)) == want, f"each order once in {table}"
        assert first.poll() is None and second.poll() is None, _log(tmp_path, "a")
    finally:
        _stop(tmp_path, [(first, "a"), (second, "b")])
        topology.delete(saga)
