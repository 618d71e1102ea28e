"""``safebunny.Saga``'s step definitions, the handler wrapper that gives a row handler its message, and the
checks of a definition.

A step's body schema and the one reader of its bodies are :mod:`safebunny.saga.define.bodies`: a row handler's
message is read here (:meth:`~safebunny.saga.define.bodies.Body.message`), a DataFrame handler's input by the
step's ``prepare`` before the handler runs (:meth:`~safebunny.saga.define.bodies.Body.prepare`).

The checks (pure) find routes no step feeds and emits a step did not declare. Such mistakes are silent at run
time (the message goes to ``<saga>.unrouted``); :func:`report_problems` logs them as warnings, or raises them
with ``SagaSettings(strict=True)`` (docs/sagas.md, "Definition checks").
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from safebunny.errors import SafeBunnyOptionError
from safebunny.exactly_once import Outcome
from safebunny.saga.define.bodies import Body, MalformedMessage
from safebunny.saga.define.names import check_name, check_shards

__all__ = ["SagaStep", "MalformedMessage", "wrap", "unfed_routes", "undeclared_emits", "require_shards"]

log = logging.getLogger("safebunny.saga")


@dataclass
class SagaStep:
    """One step: node ``node`` consumes ``consumes`` sent by ``from_node``; ``handler(df_or_row, ctx)``."""

    node: str
    consumes: str
    from_node: str
    schema: str
    handler: Callable[..., Any]
    produces: Sequence[str] = ()
    rows: bool = False
    compensates: str | None = None
    fails_as: str | None = None
    #: the query's ``maxMessagesPerTrigger``; None: the source's own, batches that grow with the backlog
    batch_size: int | None = None
    strict_schema: bool = True
    #: how many queues (and queries) the step's input is split into, by saga instance; None: one queue
    #: without a single active consumer (several drivers would compete for it)
    shards: int | None = None
    #: which of them this is, for the per-shard copies ``units()`` makes (None: the step as defined)
    shard: int | None = None
    body: Body = field(init=False, repr=False, compare=False)  # the parsed schema and the reader of bodies

    def __post_init__(self) -> None:
        for kind, value in (("node", self.node), ("type", self.consumes), ("node", self.from_node)):
            check_name(kind, value)
        for t in self.produces:
            check_name("type", t)
        if self.fails_as:
            check_name("type", self.fails_as)
        if self.shards is not None:
            check_shards(self.shards, self.label)
        self.body = Body(self.schema, self.label, self.strict_schema)

    @property
    def label(self) -> str:
        """The step's name, ``node.type`` (its poison queue, ledger and status row)."""
        return f"{self.node}.{self.consumes}"

    @property
    def unit_label(self) -> str:
        """What one query runs: the step, or one shard of it (``node.type.shard.<i>``); its checkpoint, journal,
        query name and counters are named by it."""
        return self.label if self.shard is None else f"{self.label}.shard.{self.shard}"

    def units(self) -> list[SagaStep]:
        """One per query the step runs: itself, or a copy per shard."""
        if self.shards is None:
            return [self]
        return [replace(self, shard=i) for i in range(self.shards)]


def wrap(step: SagaStep, check_emits: Callable[[SagaStep, list[str]], None] | None = None,
         ) -> Callable[[Any, Any], Outcome | None]:
    """The function the underlying :class:`safebunny.Step` calls: the user's handler, given a row handler's
    message read from its body; ``check_emits(step, types)`` sees the types of each outcome's emits."""
    def run(message: Any, ctx: Any) -> Outcome | None:
        outcome = step.handler(step.body.message(message) if step.rows else message, ctx)
        if outcome is not None and check_emits is not None and outcome.emits:
            check_emits(step, [e.type for e in outcome.emits])
        return outcome

    return run


def _produced(steps: Sequence[SagaStep]) -> set[tuple[str, str]]:
    out = set()
    for s in steps:
        out.update((s.node, t) for t in s.produces)
        if s.fails_as:
            out.add((s.node, s.fails_as))
    return out


def unfed_routes(steps: Sequence[SagaStep], started: Iterable[tuple[str, str]] = ()) -> list[str]:
    """Steps whose ``(from_node, consumes)`` no step of the saga produces and no ``saga.start`` sent.

    A ``from_node`` that is not a node of the saga is an entry point (``saga.start`` or another system
    publishes there) and is not reported."""
    nodes = {s.node for s in steps}
    fed = _produced(steps) | set(started)
    problems = []
    for s in steps:
        if s.from_node in nodes and (s.from_node, s.consumes) not in fed:
            makers = sorted(f"{p.label} produces {list(p.produces)}" for p in steps if p.node == s.from_node)
            problems.append(f"step {s.label} consumes {s.consumes!r} from node {s.from_node!r}, but no step of "
                            f"node {s.from_node!r} lists {s.consumes!r} in produces or fails_as ({'; '.join(makers)}) "
                            "and no saga.start sends it. produces does not route: what a step of node "
                            f"{s.from_node!r} emits as {s.consumes!r} still reaches this step, but the saga cannot "
                            "check the route; if nothing emits it, this step's queue stays empty. Add the type to "
                            "the producing step's produces, or fix the type or from_node.")
    return problems


def undeclared_emits(step: SagaStep, types: Iterable[str]) -> list[str]:
    """The emitted ``types`` that step ``step`` does not list in ``produces``."""
    declared = set(step.produces)
    return [f"step {step.label} emitted a message of type {t!r}, which is not in its produces {list(step.produces)}: "
            f"it was published all the same (produces does not route): a step consuming {t!r} from node "
            f"{step.node!r} gets it, and when none does it is kept in the saga's unrouted stream. Add {t!r} to "
            "produces, or fix the type." for t in sorted(set(types)) if t not in declared]


def unconsumed_start(steps: Sequence[SagaStep], node: str, message_type: str) -> list[str]:
    """A ``saga.start`` of ``message_type`` from ``node`` that no step consumes (it would go to unrouted)."""
    if any(s.from_node == node and s.consumes == message_type for s in steps):
        return []
    known = ", ".join(f"{s.label} from {s.from_node}" for s in steps) or "none"
    return [f"saga.start(node={node!r}, type={message_type!r}): no step consumes {message_type!r} from node "
            f"{node!r}, so these messages would go to the unrouted queue; steps: {known}."]


def report_problems(saga_name: str, problems: Sequence[str], strict: bool, seen: set[str]) -> None:
    """Warn about each problem once (per ``seen`` set), or raise them all when ``strict``."""
    if not problems:
        return
    if strict:
        raise SafeBunnyOptionError(f"Saga {saga_name!r} (strict=True): " + " ".join(problems), "strict")
    for problem in problems:
        if problem not in seen:
            seen.add(problem)
            log.warning("saga %s: %s", saga_name, problem)


def require_shards(saga_name: str, driver: str, steps: Sequence[SagaStep]) -> None:
    """Among several drivers, every step must be sharded: an unsharded queue has competing consumers, so two
    copies of one message could be processed by two drivers at once, each before the other's inbox marker."""
    plain = [s.label for s in steps if s.shards is None]
    if plain:
        raise SafeBunnyOptionError(
            f"Saga {saga_name!r} runs as driver {driver!r} (one of several), but step(s) {', '.join(plain)} read one "
            "queue that every driver would consume from at once. Give each step shards=N (1 or more): each shard "
            "is held by one driver at a time and handed to another when its holder goes.", "shards")
