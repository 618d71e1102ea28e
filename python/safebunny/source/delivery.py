"""One message taken off a classic or quorum queue, with the channel generation that delivered it
(delivery tags are channel-scoped: an ack for an older generation is dropped)."""

from __future__ import annotations

from typing import Any, NamedTuple

__all__: list[str] = []


class Delivery(NamedTuple):
    """One message taken off the queue, with the channel generation that delivered it.

    A named tuple, not a dataclass: one is built per message on the I/O thread's hot path.
    """

    generation: int
    delivery_tag: int
    body: bytes
    properties: Any
    exchange: str
    routing_key: str
    redelivered: bool
