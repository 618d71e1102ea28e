"""What the saga page (``saga.view()``) shows, gathered from the saga's durable state and the broker (as
``saga.status()`` is, so any process sees the same, over Spark Connect too), and the page itself.

:func:`gather` returns the page's data as plain JSON values (``safebunny view`` serves it as ``/status.json``);
:mod:`safebunny.saga.look.view_html` turns it into HTML without a broker. A section that cannot be read (the broker
down, no inbox yet) is left empty with the reason in ``errors``, so the rest of the page still shows.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from safebunny.errors import SafeBunnyError
from safebunny.saga.define.config import SagaShape
from safebunny.saga.define.graph import graph_of
from safebunny.saga.look.instance_state import STATES
from safebunny.saga.look.parked import HIDDEN_STATES, read_all_parked
from safebunny.saga.run.reports import RATE_WINDOW_S, RestartLog
from safebunny.uri import redact

__all__ = ["SagaView", "gather", "view", "STUCK_STATES", "STUCK_LISTED"]

#: the instance states listed as stuck on the page, oldest update first
STUCK_STATES = ("parked", "retrying", "running")
#: how many stuck instances the page lists
STUCK_LISTED = 10
#: a parked message's body is cut to this many characters on the page
BODY_CHARS = 200


class SagaView(str):
    """The saga page: an HTML document (a ``str``, so Databricks' ``displayHTML(saga.view())`` takes it) that
    Jupyter shows as rich output (``_repr_html_``); ``data`` holds what it was built from (:func:`gather`)."""

    data: dict[str, Any]

    def __new__(cls, html: str, data: dict[str, Any]) -> SagaView:
        page = super().__new__(cls, html)
        page.data = data
        return page

    def _repr_html_(self) -> str:
        return str(self)

    def __repr__(self) -> str:
        return f"<SagaView of saga {self.data.get('saga')!r}: {len(self)} characters of HTML>"


def _iso_age(stamp: str | None, now: dt.datetime) -> float | None:
    if not stamp:
        return None
    return round((now - dt.datetime.fromisoformat(stamp)).total_seconds(), 1)


def _out_rate(saga: Any, step: Any, now: dt.datetime) -> float | None:
    """Messages the step emitted per second over the same window as ``status``'s received rate."""
    reports = saga.reports_of(step)
    if not reports:
        return None
    since = now - dt.timedelta(seconds=RATE_WINDOW_S)
    return sum(r.emitted for r in reports if r.finished_at > since) / RATE_WINDOW_S


def _steps(saga: Any, now: dt.datetime, table: Any) -> tuple[list[dict[str, Any]], list[Any]]:
    """Per step: its definition, ``status()``'s fields, rates, last batch age, restarts and holders; and the parked
    messages of every step (all states), read once for the poison list and the instances (``table(parked)``:
    the instances, read once)."""
    from safebunny.saga.look.instances import waiting_since
    from safebunny.saga.look.status import status_fields

    parked_of = read_all_parked(saga)
    every = [p for found in parked_of.values() for p in found]
    fields = status_fields(saga, poison=False, waiting=lambda: waiting_since(table(every)))  # poison: read above
    shards: dict[str, list[dict[str, Any]]] = {}
    if any(s.shards is not None for s in saga.steps):
        for sh in saga.shards():
            shards.setdefault(sh.step, []).append({**sh.to_dict(), "restarts": RestartLog(
                saga.config.layout.root, f"{sh.step}.shard.{sh.shard}").count()})
    rows, parked = [], []
    for s, (values, counters) in zip(saga.steps, fields, strict=True):
        found = parked_of[s.label]
        parked += found
        values = {**values, "poisoned": sum(1 for p in found if p.state not in HIDDEN_STATES)}
        restarts = sum(RestartLog(saga.config.layout.root, u.unit_label).count() for u in s.units())
        holders = sorted({h["holder"] for h in shards.get(s.label, []) if h.get("holder")})
        rows.append({"label": s.label, "node": s.node, "consumes": s.consumes, "from_node": s.from_node,
                     "produces": list(s.produces), "compensates": s.compensates, "fails_as": s.fails_as,
                     "rows": s.rows, "shards": s.shards, "status": values,
                     "in_rate": counters.rate, "out_rate": _out_rate(saga, s, now),
                     "last_batch_age": _iso_age(counters.last_batch, now), "last_received": counters.last_received,
                     "last_seconds": counters.last_seconds, "restarts": restarts,
                     "driver": ", ".join(holders) if holders else counters.last_driver,
                     "shard_rows": shards.get(s.label, [])})
    return rows, parked


def _instances(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Counts by state and the oldest stuck instances."""
    counts = {state: 0 for state in STATES}
    for r in rows:
        counts[r["state"]] = counts.get(r["state"], 0) + 1
    stuck = sorted((r for r in rows if r["state"] in STUCK_STATES),
                   key=lambda r: (r["lastUpdate"] or dt.datetime.max.replace(tzinfo=dt.timezone.utc),
                                  r["correlationId"]))
    listed = [{**r, "started": _iso(r["started"]), "lastUpdate": _iso(r["lastUpdate"]),
               "waitingSince": _iso(r["waitingSince"]),
               "reason": None if r["reason"] is None else redact(r["reason"])} for r in stuck[:STUCK_LISTED]]
    return {"total": len(rows), "counts": counts, "stuck": listed, "stuck_total": len(stuck)}


def _iso(value: Any) -> str | None:
    return None if value is None else value.isoformat(timespec="seconds")


def _poison(parked: list[Any]) -> list[dict[str, Any]]:
    return [{"step": p.step, "messageId": p.messageId, "correlationId": p.correlationId, "type": p.type,
             "reason": None if p.reason is None else redact(p.reason), "errorType": p.errorType,
             "attempts": p.attempts, "parkedAt": p.parkedAt, "state": p.state,
             "body": redact(p.body[:BODY_CHARS]) + ("..." if len(p.body) > BODY_CHARS else "")}
            for p in parked if p.state not in HIDDEN_STATES]


def _section(errors: dict[str, str], name: str, read: Any, empty: Any) -> Any:
    try:
        return read()
    except (SafeBunnyError, OSError) as exc:
        errors[name] = redact(f"{type(exc).__name__}: {exc}")
        return empty


def gather(saga: SagaShape, instance: str | None = None, now: dt.datetime | None = None) -> dict[str, Any]:
    """The page's data as JSON values: the saga, its graph, per step its status and more, the shards, the unrouted
    stream, instances by state, the poison list, and ``instance``'s trace (a correlation id or a business key)."""
    from safebunny.saga.look.instances import instances_table
    from safebunny.saga.look.status import has_state, saga_problems, unrouted_depth

    now = now or dt.datetime.now(dt.timezone.utc)
    errors: dict[str, str] = {}
    s: Any = saga
    read: list[Any] = []  # the instances, read at most once: by the steps (a step nobody consumes) or below

    def table(parked: list[Any]) -> list[dict[str, Any]]:
        if not read:
            read.append(instances_table(saga, parked=parked).to_pylist())
        return read[0]

    steps, parked = _section(errors, "steps", lambda: _steps(s, now, table), ([], []))
    graph = graph_of(saga.config.name, saga.steps)
    data: dict[str, Any] = {
        "saga": saga.config.name, "broker": redact(saga.config.connection.uri),
        "generated": now.isoformat(timespec="seconds"),
        "rate_window_s": RATE_WINDOW_S,
        "graph": {"nodes": [vars(n) for n in graph.nodes], "edges": [vars(e) for e in graph.edges]},
        "steps": steps, "poison": _poison(parked),
        "unrouted": _section(errors, "unrouted", lambda: unrouted_depth(saga), None),
        "instances": _section(errors, "instances", lambda: _instances(table(parked)),
                              {"total": None, "counts": {}, "stuck": [], "stuck_total": None}),
        "instance": instance, "trace": None, "errors": errors,
        "problems": [] if "steps" in errors else _section(errors, "problems", lambda: saga_problems(
            saga.config.name, [st["status"]["backlog"] for st in steps], has_state(saga), saga.config.layout.root),
            [])}
    if instance:
        data["trace"] = _section(errors, "trace", lambda: [e.to_dict() for e in s.trace(instance)], [])
    return data


def view(saga: SagaShape, instance: str | None = None, actions: bool = False, refresh_s: float | None = None,
         token: str | None = None, served: bool = False) -> SagaView:
    """The saga page (:class:`SagaView`); ``actions``, ``refresh_s``, ``token`` and ``served`` (its instance links
    open traces) are for ``safebunny view``."""
    from safebunny.saga.look.view_html import render

    data = gather(saga, instance)
    return SagaView(render(data, actions=actions, refresh_s=refresh_s, token=token, served=served), data)
