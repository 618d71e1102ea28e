"""``safebunny.Saga``'s step definitions and the handler wrapper that gives a row handler its message.

A step's body schema and the one reader of its bodies are :mod:`safebunny.saga.bodies`: a row handler's
message is read here (:meth:`~safebunny.saga.bodies.Body.message`), a DataFrame handler's input by the
step's ``prepare`` before the handler runs (:meth:`~safebunny.saga.bodies.Body.prepare`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from safebunny.exactly_once import Outcome
from safebunny.saga.bodies import Body, MalformedMessage
from safebunny.saga.names import check_name, check_shards

__all__ = ["SagaStep", "MalformedMessage", "wrap"]


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
