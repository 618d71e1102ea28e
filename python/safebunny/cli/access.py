"""What the command line needs from a :class:`safebunny.Saga`, in one place.

Every command goes through these functions, so the commands do not depend on the saga's
internals, and each function returns plain rows (lists of dicts) for :mod:`safebunny.cli.render`.
Which broker a command talks to (:func:`resolve_uri`): ``--uri``, else ``SAFEBUNNY_URI``, else the saga's own;
the password from ``SAFEBUNNY_PASSWORD``, else the URI, else a prompt that does not echo (docs/operations.md,
"Command line"). The password is never printed or logged: every message goes through
:func:`safebunny.uri.redact`.
"""

from __future__ import annotations

import getpass
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from safebunny.cli.exits import USAGE, CliError
from safebunny.cli.locate import load_saga
from safebunny.cli.render import to_rows
from safebunny.errors import SafeBunnyOptionError
from safebunny.saga.define import topology as _topology  # loaded by ``import safebunny`` already
from safebunny.uri import redact, validate_uri, with_password

if TYPE_CHECKING:
    from safebunny.saga.define.definition import SagaStep
    from safebunny.saga.saga import Saga

__all__ = ["open_saga", "resolve_uri", "status", "instances", "problems"]


def resolve_uri(cli_uri: str | None, env: Mapping[str, str], saga_uri: str | None,
                prompt: Callable[[str], str] | None = None, interactive: bool | None = None) -> str:
    """The URI to use, with its password filled in (see the module docstring)."""
    uri = cli_uri or env.get("SAFEBUNNY_URI") or saga_uri
    if not uri:
        raise CliError("no broker URI: pass --uri amqp://user@host:5672/%2F or set SAFEBUNNY_URI", USAGE)
    source = "--uri" if cli_uri else ("SAFEBUNNY_URI" if env.get("SAFEBUNNY_URI") else "the saga's uri")
    try:
        validate_uri(uri, source)
    except SafeBunnyOptionError as exc:
        raise CliError(str(exc), USAGE) from None
    password = env.get("SAFEBUNNY_PASSWORD")
    if password:
        return with_password(uri, password)
    parts = urlsplit(uri)
    if parts.username and parts.password is None:
        if interactive is None:
            interactive = sys.stdin.isatty()
        if not interactive:
            raise CliError(f"{redact(uri)} names user {parts.username!r} but no password, and there is no terminal "
                           "to ask: set SAFEBUNNY_PASSWORD", USAGE)
        ask = prompt or getpass.getpass
        return with_password(uri, ask(f"password for {parts.username}@{parts.hostname}: "))
    return uri


def open_saga(locator: str, cli_uri: str | None, env: Mapping[str, str]) -> Saga:
    """Load the saga named by ``locator`` and point it at the broker the user chose."""
    saga = load_saga(locator)
    own = saga.connection_uri  # with the saga's password
    uri = resolve_uri(cli_uri, env, own)
    if uri != own:
        saga.uri = uri
    return saga


def select_steps(saga: Saga, spec: str | None) -> list[SagaStep]:
    """The steps ``spec`` names: every step when None, the node's steps for ``NODE``, one for ``NODE.TYPE``."""
    every = list(saga.steps)
    if spec is None:
        return every
    chosen = [s for s in every if spec in (s.label, s.node)]
    if not chosen:
        known = ", ".join(s.label for s in every) or "none"
        raise CliError(f"--step {spec!r} names no step of saga {saga.name!r}; its steps: {known}", USAGE)
    return chosen


def _topology_rows(topo: Any, depths: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = [
        {"kind": "exchange", "name": topo.exchange, "step": "", "routing": "topic",
         "arguments": {"alternate-exchange": topo.unrouted_exchange}, "ready": None},
        {"kind": "exchange", "name": topo.unrouted_exchange, "step": "", "routing": "fanout", "arguments": {},
         "ready": None}]
    bound = topo.bound_to()
    for q in topo.queues:
        depth = (depths or {}).get(q.name)
        rows.append({"kind": "queue", "name": q.name, "step": q.step, "role": q.role,
                     "routing": bound.get(q.name, ""), "arguments": dict(q.arguments),
                     "ready": None if depth is None else depth[0]})
    return rows


def declare(saga: Saga) -> list[dict[str, Any]]:
    """Declare the saga's topology (idempotent) and return what it consists of."""
    return _topology_rows(_topology.declare(saga), None)


def delete(saga: Saga) -> list[str]:
    """Delete the saga's queues and exchanges; the names of the deleted queues."""
    return _topology.delete(saga)


def topology(saga: Saga) -> list[dict[str, Any]]:
    """The saga's exchanges, queues and bindings with the broker's depth of each queue."""
    topo = _topology.plan(saga)
    return _topology_rows(topo, _topology.depths(saga, [q.name for q in topo.queues]))


def mermaid(saga: Saga) -> str:
    """The saga's flow as a Mermaid flowchart (:func:`safebunny.saga.define.graph.mermaid`), from its definition
    alone."""
    from safebunny.saga.define.graph import graph_of
    from safebunny.saga.define.graph import mermaid as as_mermaid

    return as_mermaid(graph_of(saga.name, saga.steps))


def shards(saga: Saga) -> list[dict[str, Any]]:
    """One row per shard of each sharded step (``saga.shards()``)."""
    return [{"step": s.step, "shard": s.shard, "queue": s.queue, "backlog": s.backlog,
             "held": "" if s.held is None else "yes" if s.held else "no", "lastDriver": s.last_driver,
             "lastBatch": s.last_batch, "idleSeconds": s.idle_seconds, "holder": s.holder,
             "leaseAgeSeconds": s.lease_age_seconds} for s in saga.shards()]


def status(saga: Saga) -> list[dict[str, Any]]:
    """One row per step from ``saga.status()`` (``ready``: the step queue's ready messages; ``unacked``: from
    the management API, empty when it does not answer, with ``note`` saying why)."""
    return [{"step": f"{row['node']}.{row['type']}", "ready": row.get("backlog"), "lastBatch": row.get("last_batch"),
             "rate": row.get("input_rate"), **row} for row in to_rows(saga.status())]


def problems(saga: Saga, rows: list[dict[str, Any]]) -> list[str]:
    """What is wrong with the saga as a whole (:func:`safebunny.saga.look.status.saga_problems`), from ``status``'s
    rows: its queues not declared, no state under its root."""
    from safebunny.saga.look.status import has_state, saga_problems

    return saga_problems(saga.name, [r.get("backlog") for r in rows], has_state(saga), saga.config.layout.root)


def unrouted(saga: Saga) -> tuple[str, int | None]:
    """The saga's unrouted stream and how many messages it holds (None: not declared)."""
    from safebunny.saga.look.status import unrouted_depth

    return _topology.unrouted_name(saga), unrouted_depth(saga)


def instances(saga: Saga, state: str | None) -> list[dict[str, Any]]:
    """One row per saga instance (``state`` keeps one state), from :mod:`safebunny.saga.look.instances`."""
    from safebunny.saga.look.instances import instances_table

    return to_rows(instances_table(saga, state))


def poison(saga: Saga, step: SagaStep, all: bool = False) -> list[dict[str, Any]]:  # noqa: A002
    """The parked messages of one step, from ``saga.poison_rows(node, type)`` (no Spark needed); ``all``:
    also the resolved and discarded ones."""
    return [{**row, "step": step.label} for row in to_rows(saga.poison_rows(step.node, step.consumes, all=all))]


def redrive(saga: Saga, step: SagaStep, ids: list[str] | None, force: bool = False,
            error_type: str | None = None) -> int:
    """Send parked messages of ``step`` back to its queue (all of them when ``ids`` and ``error_type`` are
    None); how many. ``force``: also for a step with ``fails_as``, whose parked messages were compensated."""
    return saga.redrive(step.node, step.consumes, ids=ids, force=force, error_type=error_type or None)


def discard(saga: Saga, step: SagaStep, ids: list[str], reason: str) -> int:
    """Record parked messages of ``step`` as discarded with ``reason``; how many were found."""
    return saga.discard(step.node, step.consumes, ids, reason)


def trace(saga: Saga, correlation_id: str) -> list[dict[str, Any]]:
    """The messages of one saga instance, in order, from ``saga.trace(correlation_id)``."""
    return [{"time": row["processedAt"], "step": f"{row['node']}.{row['type']}", "attempt": row.get("delivery", 1),
             "outcome": row["status"] if not row.get("reason") else f"{row['status']}: {row['reason']}", **row}
            for row in to_rows(saga.trace(correlation_id))]
