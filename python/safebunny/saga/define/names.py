"""The names of a saga's exchange, routing keys, queues and shards, and the rule for node, type and saga names
(pure functions).

A module of its own because the saga's settings and step definitions check names, and the topology (which reads
those settings) builds its queues from the same names: with the rules here, none of the three imports another.
"""

from __future__ import annotations

import re
import zlib
from typing import Any, Protocol

from safebunny.errors import SafeBunnyOptionError

__all__ = ["Named", "check_name", "check_shards", "exchange_name", "routing_key", "BUCKETS", "MAX_SHARDS", "bucket_of",
           "instance_routing_key", "shard_of", "consumer_queue", "queue_name", "retry_queue_name", "poison_queue_name",
           "unrouted_name"]


class Named(Protocol):
    """What the queue and exchange names need of a saga: its name (a :class:`SagaConfig` or a saga)."""

    @property
    def name(self) -> str: ...


_FORBIDDEN = re.compile(r"[.*#\s/]")


def check_name(kind: str, value: str) -> str:
    """Node, type and saga names: non-empty, without ``.``, ``*``, ``#``, ``/`` or spaces."""
    if not isinstance(value, str) or not value or _FORBIDDEN.search(value):
        raise SafeBunnyOptionError(
            f"A {kind} name must be non-empty and contain no '.', '*', '#', '/' or whitespace (they are routing "
            f"key syntax); got {value!r}.", kind)
    return value


def exchange_name(saga: Named) -> str:
    return check_name("saga", saga.name)


def routing_key(node: str, message_type: str) -> str:
    return f"{check_name('node', node)}.{check_name('type', message_type)}"


#: a saga message's routing key ends in one of this many buckets; a sharded step's shards split them
BUCKETS = 64
MAX_SHARDS = BUCKETS


def bucket_of(correlation_id: str | None) -> int:
    """The bucket of a saga instance: a stable hash of its correlation id (CRC-32, the same in every process
    and release; changing it would send an instance's later messages to another shard)."""
    return zlib.crc32((correlation_id or "").encode("utf-8")) % BUCKETS


def instance_routing_key(node: str, message_type: str, correlation_id: str | None) -> str:
    """The routing key of a saga message that a sharded step consumes: ``node.type.<bucket of its instance>``."""
    return f"{routing_key(node, message_type)}.{bucket_of(correlation_id)}"


def check_shards(shards: Any, label: str) -> None:
    if isinstance(shards, bool) or not isinstance(shards, int) or not 1 <= shards <= MAX_SHARDS:
        raise SafeBunnyOptionError(
            f"Step {label}: shards must be an integer from 1 to {MAX_SHARDS} (a saga's messages are routed into "
            f"{BUCKETS} buckets, which the shards split); got {shards!r}.", "shards")


def shard_of(correlation_id: str | None, shards: int) -> int:
    """The shard of a step with ``shards`` shards that a saga instance's messages reach."""
    return bucket_of(correlation_id) % shards


def consumer_queue(saga: Named, node: str, message_type: str, shard: int | None = None) -> str:
    """A step's consumer queue: ``S.C.T``, or shard ``shard``'s ``S.C.T.shard.<i>``."""
    base = queue_name(saga, node, message_type)
    return base if shard is None else f"{base}.shard.{shard}"


def queue_name(saga: Named, node: str, message_type: str) -> str:
    return f"{exchange_name(saga)}.{routing_key(node, message_type)}"


def retry_queue_name(saga: Named, node: str, message_type: str, tier: int, shard: int | None = None) -> str:
    return f"{consumer_queue(saga, node, message_type, shard)}.retry.{tier}"


def poison_queue_name(saga: Named, node: str, message_type: str) -> str:
    return f"{queue_name(saga, node, message_type)}.poison"


def unrouted_name(saga: Named) -> str:
    return f"{exchange_name(saga)}.unrouted"
