"""One run of the demo saga: reset, declare, publish, drain under a monitor, gather and check."""

from __future__ import annotations

import argparse
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from safebunny.demo.checks import Summary, summarise
from safebunny.demo.orders import Plan, plan_orders

if TYPE_CHECKING:
    from safebunny.saga.saga import Saga

__all__: list[str] = []


def read_table(path: str, columns: list[str]) -> list[dict[str, Any]]:
    """The rows of the Delta table at ``path`` (empty when it was never written)."""
    from safebunny.delta.backend import delta_target

    found = delta_target(path).read(columns=columns)
    return [] if found is None else found.to_pylist()


def _publish_malformed(saga: Saga, plan: Plan) -> None:
    """Publish the malformed orders as the ``orders`` node would, with bodies that do not parse."""
    import pika

    from safebunny import topology
    from safebunny.amqp.connection import open_blocking
    from safebunny.ids import correlation_id_for, saga_start

    conn = open_blocking(saga.connection_uri, action="publish the demo's malformed orders",
                         name=saga.config.connection_name("demo-publisher"))
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        for oid, body in plan.malformed:
            correlation, message = saga_start(correlation_id_for(oid), "orders", "OrderPlaced")
            props = pika.BasicProperties(message_id=message, correlation_id=correlation, delivery_mode=2,
                                         content_type="application/json", type="OrderPlaced")
            ch.basic_publish(topology.exchange_name(saga), topology.routing_key("orders", "OrderPlaced"), body,
                             props, mandatory=True)
    finally:
        conn.close()


def run(spark: Any, uri: str, work: Path, args: argparse.Namespace) -> tuple[Summary, Path | None, float]:
    """Run the demo saga once; returns the checked summary, the chart's path (None without matplotlib) and the
    drain's seconds. The saga's topology is deleted at the end unless ``args.keep``."""
    import safebunny
    from safebunny.cli.render import to_rows
    from safebunny.demo import fulfilment
    from safebunny.demo.monitor import Monitor, write_chart
    from safebunny.optional import available

    plan = plan_orders(args.orders, args.declined, args.malformed, args.duplicates)
    schema = getattr(args, "tables", None)
    saga = fulfilment.build(uri, work, name=args.name or f"{fulfilment.NAME}-{uuid.uuid4().hex[:8]}", schema=schema,
                            checkpoints=getattr(args, "checkpoints", None))
    safebunny.topology.delete(saga)          # what an earlier run under this name left behind
    safebunny.topology.declare(saga)
    steps = list(saga.steps)
    print(f"declared saga {saga.name!r}: {len(steps)} steps, retry tiers and poison queues (watch it: "
          f"SAFEBUNNY_DEMO_NAME={saga.name} SAFEBUNNY_DEMO_DIR={work}"
          f"{f' SAFEBUNNY_DEMO_TABLES={schema}' if schema else ''} safebunny status safebunny.demo.fulfilment)")

    for orders in filter(None, (plan.orders, plan.duplicates)):  # the duplicates: some of the orders again
        saga.start(spark.createDataFrame(orders, fulfilment.ORDER_SCHEMA), node="orders", type="OrderPlaced",
                   business_key="orderId")
    _publish_malformed(saga, plan)
    print(f"published {plan.total} orders: {len(plan.declined)} with a declined card, {len(plan.malformed)} "
          f"malformed, {len(plan.duplicates)} sent twice")

    queues = {f"{s.node}.{s.consumes}": safebunny.topology.queue_name(saga, s.node, s.consumes) for s in steps}
    expected = plan.total + len(plan.duplicates) + 2 * len(plan.orders)   # stock + payment + shipping/release
    with Monitor(spark, uri, queues, expected, show_bar=not args.no_bar) as monitor:
        saga.drain(spark)
        elapsed = monitor.elapsed

    paths = fulfilment.tables(work, schema)
    status = {f"{r['node']}.{r['type']}": r for r in to_rows(saga.status())}
    poisoned = [p.correlationId for s in steps for p in saga.poison_rows(s.node, s.consumes)]
    summary = summarise(
        plan,
        read_table(paths["reservations"], ["orderId", "qty"]),
        read_table(paths["payments"], ["orderId", "status"]),
        read_table(paths["shipments"], ["orderId"]),
        poisoned,
        sum(int(r.get("duplicates") or 0) for r in status.values()),
        {label: int(r.get("backlog") or 0) + int(r.get("retrying") or 0) for label, r in status.items()},
    )
    chart = write_chart(work / "demo-throughput.png", monitor.throughput, monitor.backlog,
                        f"{saga.name}: {plan.total} orders, drained in {elapsed:.0f} s") \
        if available("matplotlib") else None
    if getattr(args, "keep", False):
        print(f"kept saga {saga.name!r} on the broker; remove it with: SAFEBUNNY_DEMO_NAME={saga.name} "
              f"SAFEBUNNY_DEMO_DIR={work} safebunny topology delete safebunny.demo.fulfilment --yes")
    else:
        deleted = safebunny.topology.delete(saga)
        print(f"deleted saga {saga.name!r}'s {len(deleted)} queues and its exchanges from the broker "
              "(--keep keeps them)")
    return summary, chart, elapsed
