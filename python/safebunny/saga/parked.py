"""Reading and redriving the messages parked in a step's poison queue (a stream queue)."""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict, dataclass
from typing import Any

from safebunny.amqp import topology
from safebunny.amqp.connection import open_blocking
from safebunny.saga.retry import ATTEMPT, ERROR, ERROR_TYPE, FIRST_FAILURE, REASON, STEP

__all__ = ["Parked", "read_parked", "redrive"]

_IDLE_S = 0.5


@dataclass(frozen=True)
class Parked:
    """One message in a poison queue, with why it is there."""

    step: str
    offset: int
    messageId: str | None  # noqa: N815 - the source's column names
    correlationId: str | None  # noqa: N815
    type: str | None
    reason: str | None
    errorType: str | None  # noqa: N815
    attempts: int
    firstFailure: str | None  # noqa: N815
    parkedAt: str | None  # noqa: N815
    body: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _consume_all(uri: str, queue: str) -> list[tuple[Any, bytes, int]]:
    conn = open_blocking(uri, action=f"read the poison queue {queue!r}")
    out = []
    try:
        ch = conn.channel()
        ch.basic_qos(prefetch_count=500)
        for method, props, body in ch.consume(queue, arguments={"x-stream-offset": "first"},
                                              inactivity_timeout=_IDLE_S):
            if method is None:
                break
            offset = int((props.headers or {}).get("x-stream-offset", len(out)))
            out.append((props, body, offset))
            ch.basic_ack(method.delivery_tag)
        ch.cancel()
    finally:
        conn.close()
    return out


def read_parked(saga: Any, node: str, message_type: str) -> list[Parked]:
    """Every message parked in the poison queue of step ``node.message_type``, oldest first."""
    queue = topology.poison_queue_name(saga, node, message_type)
    parked = []
    for props, body, offset in _consume_all(saga.connection_uri, queue):
        h = props.headers or {}
        stamp = dt.datetime.fromtimestamp(props.timestamp, dt.timezone.utc).isoformat() if props.timestamp else None
        parked.append(Parked(str(h.get(STEP, f"{node}.{message_type}")), offset, props.message_id,
                             props.correlation_id, props.type, _text(h.get(REASON) or h.get(ERROR)),
                             _text(h.get(ERROR_TYPE)), int(h.get(ATTEMPT, 0) or 0), _text(h.get(FIRST_FAILURE)),
                             stamp, body.decode("utf-8", "replace")))
    return parked


def redrive(saga: Any, node: str, message_type: str, ids: list[str] | None = None) -> int:
    """Republish parked messages (all, or those with the given ids) to the step's queue with their attempt
    count reset; the inbox drops any that succeeded meanwhile. Returns how many were republished."""
    import pika

    queue = topology.poison_queue_name(saga, node, message_type)
    target = topology.queue_name(saga, node, message_type)
    wanted = set(ids) if ids is not None else None
    chosen: dict[str, tuple[Any, bytes]] = {}
    for props, body, _ in _consume_all(saga.connection_uri, queue):
        if wanted is None or props.message_id in wanted:
            chosen[props.message_id] = (props, body)  # the latest copy of each id
    conn = open_blocking(saga.connection_uri, action=f"redrive messages to {target!r}")
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        for props, body in chosen.values():
            headers = {k: v for k, v in (props.headers or {}).items()
                       if not k.startswith("x-safebunny-") and k not in ("x-stream-offset", "x-death")}
            headers["x-safebunny-redriven"] = dt.datetime.now(dt.timezone.utc).isoformat()
            ch.basic_publish("", target, body, pika.BasicProperties(
                message_id=props.message_id, correlation_id=props.correlation_id, type=props.type,
                content_type=props.content_type, delivery_mode=2, headers=headers), mandatory=True)
    finally:
        conn.close()
    return len(chosen)


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
