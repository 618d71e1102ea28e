"""The state of each saga instance, derived from the steps' inbox rows, the parked messages and the started
records (pure functions; :mod:`safebunny.saga.look.instances` reads those and builds the DataFrame).

An instance is the set of messages with one correlation id. States by precedence: ``parked``, ``retrying``,
``running``, ``discarded``, ``compensated``, ``completed``; what each means and what a terminal step is:
docs/operations.md ("Saga instances").
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pyarrow as pa

from safebunny.errors import moved_names
from safebunny.ids import message_id
from safebunny.saga.look.parked import Parked as ParkedMessage

__all__ = ["STATES", "instance_rows"]
__getattr__ = moved_names(__name__, {"Parked": "use safebunny.saga.look.parked.Parked (what read_parked returns); "
                                               "its discardReason is a discarded message's reason."})

STATES = ("running", "retrying", "parked", "discarded", "compensated", "completed")
INSTANCE_SCHEMA = pa.schema([
    ("businessKey", pa.string()), ("correlationId", pa.string()), ("state", pa.string()), ("step", pa.string()),
    ("started", pa.timestamp("us", tz="UTC")), ("lastUpdate", pa.timestamp("us", tz="UTC")),
    ("stepsDone", pa.int32()), ("messages", pa.int32()), ("reason", pa.string()),
    ("waitingSince", pa.timestamp("us", tz="UTC")),
])


def _label(row: Mapping[str, Any]) -> str:
    return f"{row['node']}.{row['type']}" if row.get("type") else str(row["node"])


def _expected(row: Mapping[str, Any], consumed_by: Mapping[str, set[str]]) -> set[str]:
    """The ids a done row emitted that a step of the saga consumes (ids are derived: recompute them)."""
    types = consumed_by.get(row["node"], set())
    n = len(row["emitted"] or ())
    return {message_id(row["messageId"], row["node"], t, i) for t in types for i in range(n)}


def instance_rows(inbox: Iterable[Mapping[str, Any]], steps: Sequence[Any], parked: Iterable[ParkedMessage] = (),
                  started: Iterable[Mapping[str, Any]] = ()) -> pa.Table:
    """One row per instance (:data:`INSTANCE_SCHEMA`), newest update first.

    ``inbox``: inbox rows (node, messageId, correlationId, type, status, reason, emitted, processedAt);
    ``steps``: the saga's step definitions; ``started``: rows with businessKey, correlationId, startedAt."""
    consumed_by: dict[str, set[str]] = defaultdict(set)
    queue_of: dict[tuple[str, str], list[str]] = defaultdict(list)  # (sender, type) -> the steps it waits at
    for s in steps:
        consumed_by[s.from_node].add(s.consumes)
        queue_of[(s.from_node, s.consumes)].append(f"{s.node}.{s.consumes}")
    compensation = {s.label for s in steps if getattr(s, "compensates", None)}
    with_fails_as = {s.label for s in steps if getattr(s, "fails_as", None)}
    by_instance: dict[str | None, list[Mapping[str, Any]]] = defaultdict(list)
    done_ids: set[str] = set()
    done_at: set[tuple[str, str]] = set()
    for row in inbox:
        by_instance[row["correlationId"]].append(row)
        if row["status"] == "done":
            done_ids.add(row["messageId"])
            done_at.add((_label(row), row["messageId"]))
    parked_of: dict[str | None, list[ParkedMessage]] = defaultdict(list)
    for p in parked:
        if p.messageId is not None and (p.step, p.messageId) not in done_at:  # a redrive resolved it
            parked_of[p.correlationId].append(p)
    first: dict[str, tuple[str | None, dt.datetime | None, str | None]] = {}
    for s in started:
        key, corr, at = s.get("businessKey"), s["correlationId"], s.get("startedAt")
        known = first.get(corr)
        if known is None or (at is not None and (known[1] is None or at < known[1])):
            first[corr] = (key, at, ", ".join(queue_of.get((s.get("node"), s.get("type")), [])) or None)
    out = []
    for corr in (set(by_instance) | set(first) | set(parked_of)) - {None}:  # no correlation id: no instance
        out.append(_instance(corr, by_instance.get(corr, []), parked_of.get(corr, []), first.get(corr),
                             done_ids, done_at, consumed_by, compensation, with_fails_as, queue_of))
    out.sort(key=lambda r: r["lastUpdate"] or dt.datetime.min.replace(tzinfo=dt.timezone.utc), reverse=True)
    return pa.Table.from_pylist(out, schema=INSTANCE_SCHEMA)


def _waits_at(row: Mapping[str, Any], emitted: str, consumed_by: Mapping[str, set[str]],
              queue_of: Mapping[tuple[str, str], list[str]]) -> list[str]:
    """The steps whose queue holds ``emitted``, a message ``row``'s step sent (its id says its type)."""
    n = len(row["emitted"] or ())
    for t in consumed_by.get(row["node"], set()):
        if any(message_id(row["messageId"], row["node"], t, i) == emitted for i in range(n)):
            return list(queue_of.get((row["node"], t), []))
    return []


def _instance(corr: str | None, rows: list[Mapping[str, Any]], parked: list[ParkedMessage],
              start: tuple[str | None, dt.datetime | None, str | None] | None, done_ids: set[str],
              done_at: set[tuple[str, str]], consumed_by: Mapping[str, set[str]], compensation: set[str],
              with_fails_as: set[str], queue_of: Mapping[tuple[str, str], list[str]]) -> dict[str, Any]:
    rows = sorted(rows, key=lambda r: r["processedAt"])
    done = [r for r in rows if r["status"] == "done"]
    compensated = any(_label(r) in compensation for r in done)
    discarded = [p for p in parked if p.state == "discarded"]
    stuck = [p for p in parked if p.state != "discarded" and not (compensated and p.step in with_fails_as)]
    failing = [r for r in rows if r["status"] == "failed" and (_label(r), r["messageId"]) not in done_at
               and not any(p.messageId == r["messageId"] for p in parked)]
    given_up = {p.messageId for p in discarded}
    in_flight = [(r, e) for r in done for e in (r["emitted"] or ()) if e not in done_ids and e not in given_up]
    open_emits = [(r, e) for r, e in in_flight if e in _expected(r, consumed_by)]
    last = rows[-1] if rows else None
    waiting = None
    if stuck:
        state, step, reason = "parked", stuck[-1].step, stuck[-1].reason
    elif failing:
        state, step, reason = "retrying", _label(failing[-1]), failing[-1]["reason"]
    elif open_emits or (not rows and not discarded):  # where its next message waits, not where it was
        at = [label for r, e in open_emits for label in _waits_at(r, e, consumed_by, queue_of)]
        waiting = open_emits[0][0]["processedAt"] if open_emits else start[1] if start else None
        step = ", ".join(dict.fromkeys(at)) or (start[2] if start and not rows else None) or (
            _label(last) if last else None)
        state, reason = "running", None
    elif discarded:
        state, step, reason = "discarded", discarded[-1].step, discarded[-1].discardReason
    else:
        state, step, reason = ("compensated" if compensated else "completed"), _label(last), None
    times = [r["processedAt"] for r in rows]
    started_at = start[1] if start else None
    if times and (started_at is None or times[0] < started_at):
        started_at = times[0]
    return {"businessKey": start[0] if start else None, "correlationId": corr, "state": state, "step": step,
            "started": started_at, "lastUpdate": times[-1] if times else started_at,
            "stepsDone": len({_label(r) for r in done}), "messages": len({r["messageId"] for r in rows}),
            "reason": reason, "waitingSince": waiting}
