"""Reading and redriving the messages parked in a step's poison queue (a stream queue).

A message can be parked more than once: a batch replayed after a crash republishes its failed rows,
and a copy left in a retry tier by such a replay fails again. The listing keeps one entry per
message id, the latest copy.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict, dataclass
from typing import Any

from safebunny.amqp import topology
from safebunny.amqp.connection import open_blocking
from safebunny.errors import SafeBunnyOptionError
from safebunny.saga.republish import Copy, publish_copies
from safebunny.saga.retry import ATTEMPT, ERROR, ERROR_TYPE, FIRST_FAILURE, REASON, STEP

__all__ = ["Parked", "read_parked", "redrive", "latest_per_id"]

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


def latest_per_id(entries: list[tuple[Any, bytes, int]]) -> list[tuple[Any, bytes, int]]:
    """One entry per message id (the latest copy, at its own offset), in offset order; entries
    without a message id are all kept."""
    latest: dict[Any, tuple[Any, bytes, int]] = {}
    for props, body, offset in entries:
        key = props.message_id if props.message_id is not None else ("offset", offset)
        latest[key] = (props, body, offset)
    return sorted(latest.values(), key=lambda e: e[2])


def read_parked(saga: Any, node: str, message_type: str) -> list[Parked]:
    """The messages parked in the poison queue of step ``node.message_type``, one per message id
    (its latest copy), oldest first."""
    queue = topology.poison_queue_name(saga, node, message_type)
    parked = []
    for props, body, offset in latest_per_id(_consume_all(saga.connection_uri, queue)):
        h = props.headers or {}
        stamp = dt.datetime.fromtimestamp(props.timestamp, dt.timezone.utc).isoformat() if props.timestamp else None
        parked.append(Parked(str(h.get(STEP, f"{node}.{message_type}")), offset, props.message_id,
                             props.correlation_id, props.type, _text(h.get(REASON) or h.get(ERROR)),
                             _text(h.get(ERROR_TYPE)), int(h.get(ATTEMPT, 0) or 0), _text(h.get(FIRST_FAILURE)),
                             stamp, body.decode("utf-8", "replace")))
    return parked


def redrive(saga: Any, node: str, message_type: str, ids: list[str] | None = None, force: bool = False) -> int:
    """Republish parked messages (all, or those with the given ids) to the step's queue with their attempt
    count reset; the inbox drops any that succeeded meanwhile. Returns how many were republished.

    A step with ``fails_as`` published a failure message when it parked each of these, and compensation
    may have undone the instance's earlier steps: redriving would then complete a compensated instance.
    That is refused unless ``force`` is true."""
    step = saga.step_of(node, message_type)
    queue = topology.poison_queue_name(saga, node, message_type)
    target = topology.queue_name(saga, node, message_type)
    wanted = set(ids) if ids is not None else None
    chosen = [(props, body) for props, body, _ in latest_per_id(_consume_all(saga.connection_uri, queue))
              if wanted is None or props.message_id in wanted]
    if chosen and step.fails_as and not force:
        sample = ", ".join(str(p.message_id) for p, _ in chosen[:5]) + (", ..." if len(chosen) > 5 else "")
        raise SafeBunnyOptionError(
            f"Refusing to redrive {len(chosen)} message(s) of step {step.label} ({sample}): the step has "
            f"fails_as={step.fails_as!r}, so parking each one published a {step.fails_as} message and its saga "
            "instance may have been compensated; redriving would run it forward again. Check the instances "
            "(saga.trace / safebunny trace) and, if they should go on, redrive with force=True (--force).",
            "force")
    stamp = dt.datetime.now(dt.timezone.utc).isoformat()
    copies = []
    for props, body in chosen:
        headers = {k: v for k, v in (props.headers or {}).items()
                   if not k.startswith("x-safebunny-") and k not in ("x-stream-offset", "x-death")}
        headers["x-safebunny-redriven"] = stamp
        copies.append(Copy(props.message_id, body, "", target, props.correlation_id, props.type,
                           props.content_type, headers))
    publish_copies(saga.connection_uri, copies, f"saga:redrive/{node}.{message_type}")
    return len(copies)


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
