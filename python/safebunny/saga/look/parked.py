"""Reading, redriving and discarding the messages parked in a step's poison queue (a stream queue).

A message can be parked more than once (a replayed batch republishes its failed rows); the listing keeps one
entry per message id, the latest copy (docs/sagas.md), with its state from the step's poison ledger.

The poison ledger: what operators did with a step's parked messages, redriven or discarded, by whom, when and
why. A small JSON file ``<root>/poison/<node>.<type>.json`` written whole
(:func:`safebunny.storage.writes.write_atomically`) records per message id the last action taken;
:func:`state_of` combines it with the entry itself and the inbox into ``parked``, ``redriven``, ``resolved``
or ``discarded`` (docs/operations.md, "The poison ledger"). Two operators writing at the same instant may
lose one record (the last write wins); the message itself is never lost.
"""

from __future__ import annotations

import datetime as dt
import getpass
import socket
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

import orjson

from safebunny.amqp.connection import open_blocking
from safebunny.amqp.message_rows import as_text
from safebunny.errors import SafeBunnyOptionError
from safebunny.saga.define import topology
from safebunny.saga.define.config import SagaConfig, SagaShape
from safebunny.saga.define.definition import SagaStep
from safebunny.saga.define.retry import ATTEMPT, ERROR, ERROR_TYPE, FIRST_FAILURE, PARKED_AT, REASON, STEP
from safebunny.saga.run.parked_ids import REDRIVEN
from safebunny.saga.run.republish import Copy, publish_copies
from safebunny.spark.session import session_or_raise
from safebunny.storage.location import resolve_location
from safebunny.storage.records import read_record
from safebunny.storage.writes import write_atomically

__all__ = ["latest_per_id", "PoisonLedger", "state_of"]

_IDLE_S = 0.5
#: states a default listing leaves out (``all=True`` / ``--all`` shows them)
HIDDEN_STATES = frozenset({"resolved", "discarded"})


def _operator() -> str:
    try:
        user = getpass.getuser()
    except Exception:  # noqa: BLE001 - no user name in some containers
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


class PoisonLedger:
    """A step's ledger of its parked messages at ``location`` (``SagaLayout.poison_ledger``)."""

    def __init__(self, location: str) -> None:
        self.filesystem, self.path = resolve_location(location, "root")

    def read(self) -> dict[str, dict[str, Any]]:
        """Message id -> its last recorded action (``state``, ``at``, ``by``, ``reason``)."""
        data = read_record(self.filesystem, self.path)
        return orjson.loads(data) if data else {}

    def record(self, ids: Iterable[str], state: str, reason: str | None = None, by: str | None = None,
               now: dt.datetime | None = None) -> None:
        """Record ``state`` (``redriven`` or ``discarded``) for ``ids``."""
        if state not in ("redriven", "discarded"):
            raise ValueError(f"a ledger records 'redriven' or 'discarded', not {state!r}")
        entry = {"state": state, "at": (now or dt.datetime.now(dt.timezone.utc)).isoformat(),
                 "by": by or _operator(), "reason": reason}
        ledger = self.read()
        for mid in ids:
            ledger[mid] = entry
        write_atomically(self.filesystem, self.path, orjson.dumps(ledger, option=orjson.OPT_INDENT_2))


def state_of(entry: dict[str, Any] | None, parked_at: str | None, done: bool) -> str:
    """The state of a parked message: its ledger ``entry`` (or None), when its latest copy was parked
    (ISO time, or None when unknown) and whether the step's inbox has it ``done``."""
    if entry is None:
        return "parked"
    if parked_at is not None and parked_at > entry["at"]:
        return "parked"  # parked again after the action (a redrive that failed again)
    if entry["state"] == "discarded":
        return "discarded"
    return "resolved" if done else "redriven"


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
    state: str = "parked"  # parked, redriven, resolved or discarded (see state_of)
    headers: dict[str, str] | None = None  # the message's headers as text
    #: for a discarded message: the reason given and who gave it (``saga.discard`` / ``poison discard``)
    discardReason: str | None = None  # noqa: N815
    discardedBy: str | None = None  # noqa: N815

    to_dict = asdict


def _consume_all(uri: str, queue: str) -> list[tuple[Any, bytes, int]]:
    out = []
    name = f"safebunny/{queue}/poison-reader"
    with open_blocking(uri, action=f"read the poison queue {queue!r}", name=name) as conn:  # pika's with closes it
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
    return out


def latest_per_id(entries: list[tuple[Any, bytes, int]]) -> list[tuple[Any, bytes, int]]:
    """One entry per message id (the latest copy, at its own offset), in offset order; entries
    without a message id are all kept."""
    latest: dict[Any, tuple[Any, bytes, int]] = {}
    for props, body, offset in entries:
        key = props.message_id if props.message_id is not None else ("offset", offset)
        latest[key] = (props, body, offset)
    return sorted(latest.values(), key=lambda e: e[2])


def _entries(config: SagaConfig, node: str, message_type: str) -> list[tuple[Any, bytes, int]]:
    return latest_per_id(_consume_all(config.connection.login_uri,
                                      topology.poison_queue_name(config, node, message_type)))


def _parked_at(props: Any) -> str | None:
    """When a copy was parked: our header, else the message's timestamp (older copies), else None."""
    stamp = as_text((props.headers or {}).get(PARKED_AT))
    if stamp:
        return stamp
    return dt.datetime.fromtimestamp(props.timestamp, dt.timezone.utc).isoformat() if props.timestamp else None


def read_parked(config: SagaConfig, node: str, message_type: str, all: bool = False) -> list[Parked]:  # noqa: A002
    """The messages parked in the poison queue of step ``node.message_type``, one per message id (its
    latest copy), oldest first; resolved and discarded ones only with ``all``."""
    from safebunny.exactly_once import Inbox

    entries = _entries(config, node, message_type)
    ledger = PoisonLedger(config.layout.poison_ledger(f"{node}.{message_type}")).read()
    redriven = [str(p.message_id) for p, _, _ in entries
                if ledger.get(str(p.message_id), {}).get("state") == "redriven"]
    # the redriven ones the step's inbox has done (processed since the redrive)
    done = Inbox(config.layout.inbox, node).seen(redriven, "", -1) if redriven else set()
    parked = []
    for props, body, offset in entries:
        h = props.headers or {}
        at = _parked_at(props)
        entry = ledger.get(str(props.message_id)) or {}
        state = state_of(ledger.get(str(props.message_id)), at, str(props.message_id) in done)
        if state in HIDDEN_STATES and not all:
            continue
        discarded = state == "discarded"
        parked.append(Parked(str(h.get(STEP, f"{node}.{message_type}")), offset, props.message_id,
                             props.correlation_id, props.type, as_text(h.get(REASON) or h.get(ERROR)),
                             as_text(h.get(ERROR_TYPE)), int(h.get(ATTEMPT, 0) or 0), as_text(h.get(FIRST_FAILURE)),
                             at, body.decode("utf-8", "replace"), state,
                             {str(k): as_text(v) or "" for k, v in h.items() if k != "x-stream-offset"},
                             entry.get("reason") if discarded else None, entry.get("by") if discarded else None))
    return parked


def read_all_parked(saga: SagaShape) -> dict[str, list[Parked]]:
    """Every step's parked messages, all states, by step label: one look at which poison queues are declared, then
    a read of each declared one (a step whose poison queue is not declared has nothing parked)."""
    names = {s.label: topology.poison_queue_name(saga.config, s.node, s.consumes) for s in saga.steps}
    declared = topology.depths(saga, list(names.values()))
    return {s.label: read_parked(saga.config, s.node, s.consumes, all=True) if declared.get(names[s.label]) else []
            for s in saga.steps}


def redrive(config: SagaConfig, step: SagaStep, ids: list[str] | None = None, force: bool = False,
            error_type: str | None = None) -> int:
    """:meth:`Saga.redrive <safebunny.saga.saga.Saga.redrive>` (which says what is redriven and when it is
    refused), with each message's attempt count reset and each recorded as ``redriven`` in the poison ledger."""
    node, message_type = step.node, step.consumes
    wanted = set(ids) if ids is not None else None
    ledger = PoisonLedger(config.layout.poison_ledger(step.label))
    recorded = ledger.read()
    chosen = [(props, body) for props, body, _ in _entries(config, node, message_type)
              if (wanted is None or props.message_id in wanted)
              and (error_type is None or as_text((props.headers or {}).get(ERROR_TYPE)) == error_type)
              and state_of(recorded.get(str(props.message_id)), _parked_at(props), False) != "discarded"]
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
        headers[REDRIVEN] = stamp
        # back to the queue (of a sharded step: the shard) that the message's instance routes to
        shard = None if step.shards is None else topology.shard_of(props.correlation_id, step.shards)
        target = topology.consumer_queue(config, node, message_type, shard)
        copies.append(Copy(props.message_id, body, "", target, props.correlation_id, props.type,
                           props.content_type, headers))
    publish_copies(config.connection.login_uri, copies, f"saga:redrive/{step.label}", config.connection_name("redrive"))
    if copies:
        ledger.record([str(c.message_id) for c in copies], "redriven")
    return len(copies)


def discard(config: SagaConfig, node: str, message_type: str, ids: list[str], reason: str) -> int:
    """Give up on parked messages on purpose: each id found in the poison queue is recorded as
    ``discarded`` with ``reason`` and who did it (user@host), hidden from listings and
    never redriven. Returns how many were found and recorded."""
    if not reason or not reason.strip():
        raise SafeBunnyOptionError("discard needs a reason (what was decided and why); it is recorded with the "
                                   "message.", "reason")
    present = {str(p.message_id) for p, _, _ in _entries(config, node, message_type)}
    found = [mid for mid in ids if mid in present]
    if found:
        ledger = PoisonLedger(config.layout.poison_ledger(f"{node}.{message_type}"))
        ledger.record(found, "discarded", reason.strip())
    return len(found)


def parked_frame(rows: list[Parked], spark: Any = None) -> Any:
    """Parked messages as a DataFrame in the active (or given) session (``saga.poison``)."""
    session = session_or_raise(spark, "saga.poison(...)", "saga.poison_rows(...)")
    schema = ("step string, offset long, messageId string, correlationId string, type string, reason string, "
              "errorType string, attempts int, firstFailure string, parkedAt string, body string, "
              "state string, headers map<string,string>, discardReason string, discardedBy string")
    return session.createDataFrame([p.to_dict() for p in rows], schema)
