"""Sharded saga steps without a broker: routing keys by instance bucket, the shard queues and their
bindings, per-shard names, and the status of a step summed over its shards."""

from __future__ import annotations

import zlib
from types import SimpleNamespace

import pyarrow as pa
import pytest

from safebunny import Retry
from safebunny.errors import SafeBunnyOptionError
from safebunny.exactly_once.emits.routed_rows import build_publish_rows
from safebunny.options.connection import ConnectionSettings
from safebunny.saga.define import topology
from safebunny.saga.define.config import SagaConfig, SagaLayout, SagaSettings
from safebunny.saga.define.definition import SagaStep
from safebunny.saga.look.status import combined
from safebunny.saga.run.reports import COUNTERS, StepCounters


def _step(shards: int | None = None) -> SagaStep:
    return SagaStep("payment", "StockReserved", "stock", "orderId string", lambda df, ctx: None, shards=shards)


def _saga(shards: int | None) -> SimpleNamespace:
    config = SagaConfig("fulfilment", ConnectionSettings("amqp://localhost"), SagaLayout("/tmp/safebunny-unit-shards"),
                        SagaSettings(Retry(delays=("10s",))))
    return SimpleNamespace(name="fulfilment", config=config, steps=[_step(shards)])


def test_an_instance_always_has_the_same_bucket_and_key() -> None:
    assert topology.bucket_of("order-7") == zlib.crc32(b"order-7") % 64  # stable across processes and releases
    assert topology.instance_routing_key("stock", "StockReserved", "order-7") == (
        f"stock.StockReserved.{topology.bucket_of('order-7')}")
    assert {topology.bucket_of(f"c{i}") for i in range(2000)} == set(range(64))  # every bucket is used
    assert topology.shard_of("order-7", 4) == topology.bucket_of("order-7") % 4


def test_shard_queues_split_the_buckets_and_have_one_active_consumer_each() -> None:
    topo = topology.plan(_saga(4))
    consumers = [q for q in topo.queues if q.role == "consumer"]
    assert [q.name for q in consumers] == [f"fulfilment.payment.StockReserved.shard.{i}" for i in range(4)]
    assert all(q.arguments["x-single-active-consumer"] is True and q.arguments["x-queue-type"] == "quorum"
               for q in consumers)
    keys = [b.routing_key for b in topo.bindings if b.exchange == "fulfilment"]
    assert sorted(keys) == sorted(f"stock.StockReserved.{b}" for b in range(64))  # each bucket bound once
    for b in topo.bindings:
        if b.exchange == "fulfilment":
            assert b.queue.endswith(f".shard.{int(b.routing_key.rsplit('.', 1)[1]) % 4}")
    retry = {q.name: q.arguments for q in topo.queues if q.role == "retry"}
    assert retry["fulfilment.payment.StockReserved.shard.2.retry.0"]["x-dead-letter-routing-key"] == (
        "fulfilment.payment.StockReserved.shard.2")
    poison = [q.name for q in topo.queues if q.role == "poison"]
    assert poison == ["fulfilment.payment.StockReserved.poison"]  # one per step, for every shard
    assert topo.bound_to()["fulfilment.payment.StockReserved.shard.1"].startswith("stock.StockReserved.{1,5,9,")


def test_an_unsharded_step_takes_every_bucket_and_the_bare_key() -> None:
    topo = topology.plan(_saga(None))
    [binding] = [b for b in topo.bindings if b.exchange == "fulfilment"]
    assert (binding.queue, binding.routing_key) == ("fulfilment.payment.StockReserved", "stock.StockReserved.#")
    assert "x-single-active-consumer" not in next(q for q in topo.queues if q.role == "consumer").arguments


def test_a_sharded_step_runs_one_unit_per_shard_with_its_own_names() -> None:
    step = _step(3)
    units = step.units()
    assert [u.unit_label for u in units] == [f"payment.StockReserved.shard.{i}" for i in range(3)]
    assert {u.label for u in units} == {"payment.StockReserved"}
    assert _step().units()[0].unit_label == "payment.StockReserved"
    assert [u.unit_label for u in _step(1).units()] == ["payment.StockReserved.shard.0"]  # one shard, held by one


@pytest.mark.parametrize("bad", [0, 65, "2", 2.0, True])
def test_shards_out_of_range_are_refused_naming_the_step(bad: object) -> None:
    with pytest.raises(SafeBunnyOptionError, match=r"Step payment.StockReserved: shards must be .*got"):
        _step(bad)  # type: ignore[arg-type]


def test_emits_route_each_row_by_its_instance() -> None:
    table = pa.table({"messageId": ["m1", "m2"], "orderId": ["a", "b"]})
    rows, _ = build_publish_rows(table, node="stock", message_type="StockReserved", exchange="fulfilment",
                                 routing_key=lambda c: f"k.{c}", correlation_of={"m1": "c1", "m2": "c2"}, what="t")
    assert rows.column("routingKey").to_pylist() == ["k.c1", "k.c2"]


def test_a_steps_counters_are_its_shards_summed() -> None:
    def counters(step: str, received: int, rate: float | None, last: str | None) -> StepCounters:
        return StepCounters(step, {**dict.fromkeys(COUNTERS, 0), "batches": 1, "received": received,
                                   "processed": received}, rate, last, 1, None, received, received / 10)

    total = combined([counters("p.T.shard.0", 5, 1.5, "2026-11-24T10:00:00"),
                      counters("p.T.shard.1", 7, None, "2026-11-24T11:00:00")])
    assert (total.step, total.totals["batches"], total.totals["received"], total.rate, total.last_batch) == (
        "p.T", 2, 12, 1.5, "2026-11-24T11:00:00")
    assert (total.last_received, total.last_seconds) == (12, 0.7)  # the shards' last batches: rows added, longest


def test_several_drivers_keep_their_own_checkpoints_and_journals(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import safebunny

    saga = safebunny.Saga("fulfilment", uri="amqp://guest:guest@127.0.0.1:5672/%2F", root=str(tmp_path),
        settings=safebunny.SagaSettings(driver="host-a"))
    saga.step("stock", consumes="OrderPlaced", from_node="orders", schema="orderId string", shards=2)(
        lambda df, ctx: None)
    unit = saga.units()[1]
    layout = saga.config.layout
    assert layout.checkpoint(unit.unit_label) == str(tmp_path / "drivers" / "host-a" / "checkpoints" /
                                                     "stock.OrderPlaced.shard.1")
    assert layout.journal(unit.unit_label) == str(tmp_path / "drivers" / "host-a" / "journal" /
                                                  "stock.OrderPlaced.shard.1")
    assert saga.inbox_path == str(tmp_path / "inbox")  # shared by every driver
    alone = safebunny.Saga("fulfilment", uri="amqp://guest:guest@127.0.0.1:5672/%2F", root=str(tmp_path))
    assert alone.config.layout.checkpoint(unit.unit_label) == str(tmp_path / "checkpoints" /
                                                                  "stock.OrderPlaced.shard.1")


def test_drivers_with_a_checkpoints_home_keep_a_folder_each_there(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Issue 48, item 2: ``Saga(driver=..., checkpoints=...)`` gave every driver the same checkpoint."""
    from safebunny.saga.define.config import SagaLayout

    home = tmp_path / "ck"
    a, b = (SagaLayout(str(tmp_path / "root"), d, str(home)) for d in ("a", "b"))
    assert a.checkpoint("stock.OrderPlaced.shard.0") == str(home / "a" / "stock.OrderPlaced.shard.0")
    assert b.checkpoint("stock.OrderPlaced.shard.0") == str(home / "b" / "stock.OrderPlaced.shard.0")
    # one driver: the path it always had, so an existing checkpoint (and its epoch) is kept
    assert SagaLayout(str(tmp_path / "root"), None, str(home)).checkpoint("s.T") == str(home / "s.T")


def test_among_several_drivers_every_step_must_be_sharded() -> None:
    from safebunny.saga.define.definition import require_shards

    require_shards("fulfilment", "host-a", [_step(1), _step(4)])
    with pytest.raises(SafeBunnyOptionError, match=r"driver 'host-a'.*payment.StockReserved.*shards=N"):
        require_shards("fulfilment", "host-a", [_step(2), _step()])


def test_a_driver_name_follows_the_naming_rules() -> None:
    import safebunny

    with pytest.raises(SafeBunnyOptionError, match="driver name"):
        safebunny.Saga("s", uri="amqp://127.0.0.1", root="/tmp/x", settings=safebunny.SagaSettings(driver="a/b"))


def test_the_command_line_shows_one_row_per_shard() -> None:
    from safebunny.cli import access
    from safebunny.saga.look.status import ShardStatus

    saga = SimpleNamespace(shards=lambda: [ShardStatus("stock.OrderPlaced", 0, "s.stock.OrderPlaced.shard.0", 3, True,
                                                       "host-b", "2026-11-24T10:00:00+00:00", 1.5)])
    assert access.shards(saga) == [{"step": "stock.OrderPlaced", "shard": 0, "queue": "s.stock.OrderPlaced.shard.0",
                                    "backlog": 3, "held": "yes", "lastDriver": "host-b",
                                    "lastBatch": "2026-11-24T10:00:00+00:00", "idleSeconds": 1.5, "holder": None,
                                    "leaseAgeSeconds": None}]


def test_only_types_a_sharded_step_consumes_carry_the_bucket() -> None:
    saga = SimpleNamespace(steps=[_step(4), SagaStep("shipping", "PaymentCharged", "payment", "orderId string",
                                                     lambda df, ctx: None)])
    assert topology.routes_by_instance(saga, "stock", "StockReserved")
    assert topology.message_routing_key(saga, "stock", "StockReserved", "order-7") == (
        f"stock.StockReserved.{topology.bucket_of('order-7')}")
    # a queue of your own bound to payment.PaymentCharged keeps receiving it
    assert not topology.routes_by_instance(saga, "payment", "PaymentCharged")
    assert topology.message_routing_key(saga, "payment", "PaymentCharged", "order-7") == "payment.PaymentCharged"


def test_a_steps_query_takes_the_sources_growing_batches_unless_batch_size_is_set() -> None:
    """Issue 50: by default a step's batch takes what waits (up to the source's cap and byte budget), so a backlog
    drains in large batches and a trickle in small ones; ``batch_size`` still bounds it."""
    from dataclasses import replace

    from safebunny.saga.run.queries import source_options

    saga = _saga(None)
    assert saga.config.settings.batch_size is None and _step().batch_size is None
    assert source_options(saga, _step()).max_messages_per_trigger is None
    assert source_options(saga, replace(_step(), batch_size=500)).max_messages_per_trigger == 500
    sharded = source_options(_saga(2), _step(2).units()[1])
    assert sharded.max_messages_per_trigger is None and sharded.single_active_consumer
    with pytest.raises(SafeBunnyOptionError, match="batch_size must be >= 1"):
        SagaSettings(batch_size=0)
