"""The path of one saga instance through the steps' inboxes, and where it stopped (``saga.trace``).

Each inbox row is one delivery of a message to a step; a parked message's last ``failed`` entry reads
``parked`` (or ``discarded`` / ``redriven``, from the poison ledger), its ``delivery`` counted as the poison
record counts its attempts (docs/operations.md, ``safebunny trace``).
"""

from __future__ import annotations

import uuid
from collections import Counter
from dataclasses import asdict, dataclass, replace

from safebunny.errors import SafeBunnyError
from safebunny.ids import correlation_id_for
from safebunny.saga.define import topology
from safebunny.saga.define.config import SagaShape
from safebunny.saga.look.parked import read_parked

__all__ = ["TraceEntry", "candidates"]


@dataclass(frozen=True)
class TraceEntry:
    """One message of a saga instance as a step's inbox recorded it."""

    node: str
    type: str | None
    messageId: str  # noqa: N815 - the inbox's column names
    causationId: str | None  # noqa: N815
    status: str
    reason: str | None
    attempts: int
    emitted: list[str]
    batchId: int  # noqa: N815
    processedAt: str  # noqa: N815
    #: the how-manieth time this step processed this message (1, then 2 after a retry tier, ...); ``attempts``
    #: counts the tries within one delivery (a row handler's in-place retries)
    delivery: int = 1
    #: the instance's correlation id the entries were found by (a business key's derived one)
    correlationId: str | None = None  # noqa: N815

    to_dict = asdict


def candidates(key: str) -> list[str]:
    """Correlation ids to try for ``key``: itself when it is a UUID, then the id derived from it as a
    business key (``safebunny correlation-id``), so both an id and an order number work."""
    try:
        given = [str(uuid.UUID(key))]
    except ValueError:
        given = []
    return list(dict.fromkeys([*given, correlation_id_for(key)]))


def trace(saga: SagaShape, correlation_id: str) -> list[TraceEntry]:
    """The entries of instance ``correlation_id`` as given, else of the first of its :func:`candidates` the inboxes
    have (a business key's derived one), in processing order; the last failed entry of a parked message says
    ``parked`` (``discarded``, ``redriven``)."""
    from safebunny.exactly_once import Inbox

    inbox = Inbox(saga.config.layout.inbox, "trace")
    rows = []
    for correlation in dict.fromkeys([correlation_id, *candidates(correlation_id)]):
        rows = inbox.rows(correlation, all_nodes=True).to_pylist()
        if rows:
            break
    rows.sort(key=lambda r: (r["processedAt"], r["node"]))
    deliveries: Counter[tuple[str, str]] = Counter()
    out = []
    for r in rows:
        deliveries[(r["node"], r["messageId"])] += 1
        out.append(TraceEntry(r["node"], r.get("type"), r["messageId"], r["causationId"], r["status"],
                              r["reason"], r["attempts"], list(r["emitted"] or []), r["batchId"],
                              r["processedAt"].isoformat(), deliveries[(r["node"], r["messageId"])],
                              r["correlationId"]))
    return _mark_parked(saga, out)


def _mark_parked(saga: SagaShape, entries: list[TraceEntry]) -> list[TraceEntry]:
    last_failed = {}  # (node, type, message id) -> index of its last entry, when that one failed
    for i, e in enumerate(entries):
        key = (e.node, e.type, e.messageId)
        if e.status == "failed":
            last_failed[key] = i
        else:
            last_failed.pop(key, None)
    for node, mtype in sorted({(n, t) for n, t, _ in last_failed if t is not None}):
        if not any(s.node == node and s.consumes == mtype for s in saga.steps):
            continue  # a step no longer defined: nothing to say
        poison = topology.poison_queue_name(saga.config, node, mtype)
        try:
            if topology.depths(saga, [poison]).get(poison) is None:
                continue  # not declared (deleted since): nothing to say
            found = {p.messageId: p for p in read_parked(saga.config, node, mtype, all=True)}
        except SafeBunnyError:
            continue
        for (n, t, mid), i in last_failed.items():
            p = found.get(mid)
            if (n, t) == (node, mtype) and p is not None and p.state != "resolved":
                entries[i] = replace(entries[i], status=p.state, reason=p.reason or entries[i].reason,
                                     delivery=max(entries[i].delivery, p.attempts))
    return entries
