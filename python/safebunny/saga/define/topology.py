"""A saga's RabbitMQ topology by node and message type, declared idempotently.

The exchanges and queues (consumer, shard, retry, poison and ``unrouted`` queues, and the routing keys with
their buckets, :func:`bucket_of`) are described in docs/sagas.md. Before anything is created, every queue
that already exists is checked against the arguments we would declare; a difference raises
:class:`SafeBunnyTopologyError` naming the queue, the argument, both values and what to do. The naming and
argument functions are pure; the names are :mod:`safebunny.saga.define.names`' (re-exported here, where users find
them).
What this module needs of a saga is :class:`~safebunny.saga.define.config.SagaShape` (its config and steps).
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from safebunny.errors import SafeBunnyTopologyError
from safebunny.saga.define.names import (
    BUCKETS,
    bucket_of,
    consumer_queue,
    exchange_name,
    instance_routing_key,
    poison_queue_name,
    queue_name,
    retry_queue_name,
    routing_key,
    shard_of,
    unrouted_name,
)

if TYPE_CHECKING:
    from safebunny.saga.define.config import SagaShape

__all__ = ["QueueSpec", "Binding", "SafeBunnyTopologyError", "exchange_name", "routing_key", "queue_name",
           "retry_queue_name", "poison_queue_name", "bucket_of", "instance_routing_key", "routes_by_instance",
           "message_routing_key", "consumer_queue", "shard_of", "plan", "declare", "delete", "depths", "unrouted_name"]

log = logging.getLogger("safebunny.saga")


def routes_by_instance(saga: SagaShape, node: str, message_type: str) -> bool:
    """Whether messages of ``message_type`` sent by ``node`` carry their instance's bucket in the routing key:
    only when a sharded step consumes them, so a queue of your own bound to ``node.type`` keeps receiving
    every other type (bind ``node.type.#`` to receive a sharded type too)."""
    return any(s.from_node == node and s.consumes == message_type and getattr(s, "shards", None) is not None
               for s in saga.steps)


def message_routing_key(saga: SagaShape, node: str, message_type: str, correlation_id: str | None) -> str:
    """The routing key of one saga message: ``node.type``, or ``node.type.<bucket>`` when a sharded step
    consumes the type (:func:`routes_by_instance`)."""
    if routes_by_instance(saga, node, message_type):
        return instance_routing_key(node, message_type, correlation_id)
    return routing_key(node, message_type)


def router(saga: SagaShape, node: str) -> Callable[[Any], tuple[str, Any]]:
    """Where step ``node``'s emits go: the saga's exchange with the routing key ``node.type``, or, for a type a
    sharded step consumes, a function of each emit's instance (:func:`instance_routing_key`)."""
    exchange = exchange_name(saga.config)

    def route(item: Any) -> tuple[str, Any]:
        if routes_by_instance(saga, node, item.type):
            return exchange, partial(instance_routing_key, node, item.type)
        return exchange, routing_key(node, item.type)

    return route


@dataclass(frozen=True)
class QueueSpec:
    """A queue to declare: its name, role (consumer, retry, poison, unrouted) and arguments."""

    name: str
    role: str
    arguments: dict[str, Any] = field(default_factory=dict)
    step: str = ""


@dataclass(frozen=True)
class Binding:
    exchange: str
    queue: str
    routing_key: str


@dataclass
class Topology:
    """Everything a saga declares."""

    exchange: str
    unrouted_exchange: str
    queues: list[QueueSpec]
    bindings: list[Binding]

    def bound_to(self) -> dict[str, str]:
        """Each queue's binding keys as one text; a shard queue's buckets as ``F.T.{0,4,8}``."""
        keys: dict[str, list[str]] = {}
        for b in self.bindings:
            keys.setdefault(b.queue, []).append(b.routing_key)
        out = {}
        for queue, found in keys.items():
            prefixes = {k.rsplit(".", 1)[0] for k in found}
            if len(found) > 1 and len(prefixes) == 1:
                out[queue] = f"{prefixes.pop()}.{{{','.join(k.rsplit('.', 1)[1] for k in found)}}}"
            else:
                out[queue] = " ".join(found)
        return out


def plan(saga: SagaShape) -> Topology:
    """The saga's topology, computed without a broker."""
    config = saga.config
    exchange = exchange_name(config)
    unrouted = unrouted_name(config)
    unrouted_args: dict[str, Any] = {"x-queue-type": "stream"}
    if config.settings.unrouted_max_age:
        unrouted_args["x-max-age"] = config.settings.unrouted_max_age
    queues = [QueueSpec(unrouted, "unrouted", unrouted_args)]
    bindings = [Binding(unrouted, unrouted, "")]
    for step in saga.steps:
        label = f"{step.node}.{step.consumes}"
        poison = poison_queue_name(config, step.node, step.consumes)
        args: dict[str, Any] = {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": poison}
        if config.settings.quorum:
            args.update({"x-queue-type": "quorum", "x-delivery-limit": int(config.settings.delivery_limit)})
        else:
            args["x-queue-type"] = "classic"
        key = routing_key(step.from_node, step.consumes)
        shards = getattr(step, "shards", None)
        for shard in ([None] if shards is None else range(shards)):
            consumer = consumer_queue(config, step.node, step.consumes, shard)
            if shard is None:
                queues.append(QueueSpec(consumer, "consumer", args, label))
                bindings.append(Binding(exchange, consumer, f"{key}.#"))  # a bucket's key, or one without
            else:
                assert shards is not None
                # one consumer at a time per shard: the broker hands the shard to a standby when its holder goes
                queues.append(QueueSpec(consumer, "consumer", {**args, "x-single-active-consumer": True}, label))
                bindings.extend(Binding(exchange, consumer, f"{key}.{b}")
                                for b in range(BUCKETS) if b % shards == shard)
            for tier, delay_ms in enumerate(config.settings.retry.delays_ms):
                queues.append(QueueSpec(retry_queue_name(config, step.node, step.consumes, tier, shard), "retry", {
                    "x-queue-type": "classic", "x-message-ttl": int(delay_ms), "x-dead-letter-exchange": "",
                    "x-dead-letter-routing-key": consumer}, label))
        poison_args: dict[str, Any] = {"x-queue-type": "stream"}
        if config.settings.poison_max_age:
            poison_args["x-max-age"] = config.settings.poison_max_age
        queues.append(QueueSpec(poison, "poison", poison_args, label))
    return Topology(exchange, unrouted, queues, bindings)


def _mismatch(text: str, name: str) -> SafeBunnyTopologyError:
    from safebunny.streams.probe import parse_inequivalent  # on this path only: ``import safebunny`` stays light

    found = parse_inequivalent(text)
    if found is None:
        return SafeBunnyTopologyError(
            f"{name!r} exists with other arguments than the saga declares ({text}). Delete it after draining it, "
            "or change the saga's settings to match.")
    return SafeBunnyTopologyError(
        f"{found['what'].capitalize()} {found['name']!r} exists with {found['arg']} = {found['theirs']}, but the "
        f"saga declares {found['arg']} = {found['ours']}. Nothing was changed. Either drain and delete the "
        f"{found['what']} (e.g. rabbitmqctl delete_queue {found['name']}) so the saga can declare it, or change "
        "the saga's settings (retry delays, quorum, delivery_limit) to match what exists.")


@contextlib.contextmanager
def _quiet_pika() -> Iterator[None]:
    """pika logs a broker's 404 to a passive declare as a warning; here a 404 is an answer, not a problem."""
    logger = logging.getLogger("pika.channel")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def _passive(conn: Any, name: str) -> Any:
    """The declare-ok of a passive declare of queue ``name`` on a channel of its own, or None when the broker
    answers 404 (no such queue); any other refusal is raised."""
    import pika.exceptions

    ch = conn.channel()
    try:
        with _quiet_pika():
            ok = ch.queue_declare(name, passive=True)
    except pika.exceptions.ChannelClosedByBroker as exc:
        if exc.reply_code == 404:
            return None
        raise
    ch.close()
    return ok


def _kept_retention(queue: QueueSpec, reply: str) -> QueueSpec | None:
    """A poison or unrouted stream that exists with another ``x-max-age`` (or none, as before retention was
    declared) keeps it: a stream's arguments cannot change after it is created, and refusing would stop the
    saga for a setting. Warned, with what to do; None for any other mismatch."""
    from safebunny.streams.probe import parse_inequivalent

    found = parse_inequivalent(reply)
    if queue.role not in ("poison", "unrouted") or found is None or found["arg"] != "x-max-age":
        return None
    log.warning(f"{queue.role} queue %r exists with x-max-age = %s, not %s as the saga declares; it keeps its own "
                "retention (a stream's arguments are fixed when it is created). To change it, set a policy "
                "(rabbitmqctl set_policy --apply-to queues <name> '^%s$' '{\"max-age\":\"%s\"}') or drain, "
                "delete and declare it again.", queue.name, found["theirs"], found["ours"], re.escape(queue.name),
                found["ours"])
    arguments = {k: v for k, v in queue.arguments.items() if k != "x-max-age"}
    if found["theirs"] != "none":
        arguments["x-max-age"] = found["theirs"]
    return QueueSpec(queue.name, queue.role, arguments, queue.step)


def _open(saga: SagaShape, action: str) -> Any:
    """A connection to the saga's broker (pika's ``with`` closes it); ``action`` names what for, in its errors."""
    from safebunny.amqp.connection import open_blocking

    return open_blocking(saga.config.connection.login_uri, action=f"{action} of saga {saga.config.name!r}",
                         name=saga.config.connection_name("topology"))


def declare(saga: SagaShape) -> Topology:
    """Check what exists, then declare the saga's exchange, queues and bindings (idempotent)."""
    import pika.exceptions

    topo = plan(saga)
    with _open(saga, "declare the topology") as conn:
        # 1. check every existing queue with a declare of our arguments on a throwaway channel: the broker
        #    answers 406 (changing nothing) when they differ; nothing new is created until all agree
        for index, q in enumerate(topo.queues):
            if _passive(conn, q.name) is None:
                continue
            ch = conn.channel()
            try:
                ch.queue_declare(q.name, durable=True, arguments=q.arguments)
                ch.close()
            except pika.exceptions.ChannelClosedByBroker as exc:
                kept = _kept_retention(q, str(exc.reply_text))
                if kept is None:
                    raise _mismatch(str(exc.reply_text), q.name) from None
                topo.queues[index] = kept
        # 2. declare
        ch = conn.channel()
        try:
            ch.exchange_declare(topo.unrouted_exchange, "fanout", durable=True)
            ch.exchange_declare(topo.exchange, "topic", durable=True,
                                arguments={"alternate-exchange": topo.unrouted_exchange})
        except pika.exceptions.ChannelClosedByBroker as exc:
            raise _mismatch(str(exc.reply_text), topo.exchange) from None
        for q in topo.queues:
            ch.queue_declare(q.name, durable=True, arguments=q.arguments)
        for b in topo.bindings:
            ch.queue_bind(b.queue, b.exchange, b.routing_key)
    return topo


def depths(saga: SagaShape, names: list[str] | None = None) -> dict[str, tuple[int, int] | None]:
    """``{queue: (messages ready, consumers)}`` by passive declares (``None`` for a missing queue)."""
    import pika.exceptions

    names = names if names is not None else [q.name for q in plan(saga).queues]
    out: dict[str, tuple[int, int] | None] = {}
    with _open(saga, "read the queue depths") as conn:
        for name in names:
            try:
                ok = _passive(conn, name)
            except pika.exceptions.ChannelClosedByBroker:  # refused (not 404): no depth either
                ok = None
            out[name] = None if ok is None else (ok.method.message_count, ok.method.consumer_count)
    return out


def delete(saga: SagaShape) -> list[str]:
    """Delete the saga's queues and exchanges (what a demo or a test left behind); the deleted names."""
    topo = plan(saga)
    deleted = []
    with _open(saga, "delete the topology") as conn:
        ch = conn.channel()
        for q in topo.queues:
            ch.queue_delete(q.name)
            deleted.append(q.name)
        ch.exchange_delete(topo.exchange)
        ch.exchange_delete(topo.unrouted_exchange)
    return deleted
