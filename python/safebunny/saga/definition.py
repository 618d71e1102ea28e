"""``safebunny.Saga``'s step definitions and the handler wrapper that parses bodies with a step's schema.

With ``strict_schema`` (the default) a body whose fields do not have the schema's JSON types is
malformed and goes to poison with the field, the value and the expected type
(:func:`safebunny.saga.body_schema.mismatch`); ``strict_schema=False`` keeps Spark's coercing reader
for frame handlers (``17`` becomes ``"17"``, ``"abc"`` for a number becomes null) and passes row
handlers the body as it is.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import orjson

from safebunny.exactly_once import FailedRow, Outcome
from safebunny.saga.body_schema import mismatch, parse_schema
from safebunny.saga.topology import check_name, check_shards

__all__ = ["SagaStep", "MalformedMessage", "parse_frames", "parse_row", "wrap", "CORRUPT"]

CORRUPT = "_safebunny_corrupt"


class MalformedMessage(ValueError):
    """A message body that does not parse with the step's schema (goes to poison at once)."""


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
    batch_size: int = 1000
    strict_schema: bool = True
    #: how many queues (and queries) the step's input is split into, by saga instance; None: one queue
    #: without a single active consumer (several drivers would compete for it)
    shards: int | None = None
    #: which of them this is, for the per-shard copies ``units()`` makes (None: the step as defined)
    shard: int | None = None
    struct: Any = field(init=False, repr=False, compare=False)  # the parsed schema

    def __post_init__(self) -> None:
        for kind, value in (("node", self.node), ("type", self.consumes), ("node", self.from_node)):
            check_name(kind, value)
        for t in self.produces:
            check_name("type", t)
        if self.fails_as:
            check_name("type", self.fails_as)
        if self.shards is not None:
            check_shards(self.shards, self.label)
        self.struct = parse_schema(self.schema, self.label)

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


def parse_frames(step: SagaStep, batch: Any) -> tuple[Any, list[FailedRow]]:
    """The batch with the body's fields as columns, and the rows whose body does not parse."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, StructField, StructType

    schema = step.struct
    mistyped = _mistyped(step, batch) if step.strict_schema else []
    if mistyped:
        batch = batch.where(~F.col("messageId").isin([m.message_id for m in mistyped]))
    with_corrupt = StructType([*schema.fields, StructField(CORRUPT, StringType(), True)])
    body = F.col("value").cast("string")
    parsed = batch.withColumn("_safebunny_body", F.from_json(
        body, with_corrupt, {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT}))
    bad_flag = F.col(f"_safebunny_body.{CORRUPT}").isNotNull() | F.col("_safebunny_body").isNull() | body.isNull()
    parsed = parsed.withColumn("_safebunny_bad", bad_flag)
    bad = [FailedRow(r["messageId"], f"the body does not parse as JSON with the schema '{step.schema}': "
                     f"{(r['text'] or '<empty>')[:200]!r}", 1, r["correlationId"], MalformedMessage.__name__)
           for r in parsed.where("_safebunny_bad").select("messageId", "correlationId", body.alias("text")).collect()]
    keep = [c for c in batch.columns if c not in schema.fieldNames()]
    good = parsed.where(~F.col("_safebunny_bad")).select(*keep, *[F.col(f"_safebunny_body.{f}").alias(f)
                                                                  for f in schema.fieldNames()])
    return good, [*mistyped, *bad]


def _mistyped(step: SagaStep, batch: Any) -> list[FailedRow]:
    """The rows whose body is a JSON object with a field of the wrong JSON type (no coercion)."""
    out = []
    for r in batch.select("messageId", "correlationId", "value").collect():
        try:
            fields = orjson.loads(r["value"] or b"")
        except orjson.JSONDecodeError:
            continue  # Spark's reader below reports it as not JSON
        problem = mismatch(fields, step.struct) if isinstance(fields, dict) else None
        if problem:
            out.append(FailedRow(r["messageId"], f"the body does not match the schema '{step.schema}': {problem}",
                                 1, r["correlationId"], MalformedMessage.__name__))
    return out


def parse_row(step: SagaStep, row: dict[str, Any]) -> dict[str, Any]:
    """A row handler's message with its body's fields merged in; :class:`MalformedMessage` if it does not parse."""
    try:
        fields = orjson.loads(row.get("value") or b"")
    except orjson.JSONDecodeError as exc:
        raise MalformedMessage(f"the body is not JSON ({exc}): {(row.get('value') or b'')[:200]!r}") from None
    if not isinstance(fields, dict):
        raise MalformedMessage(f"the body is JSON but not an object: {(row.get('value') or b'')[:200]!r}")
    if step.strict_schema:
        problem = mismatch(fields, step.struct)
        if problem:
            raise MalformedMessage(f"the body does not match the schema '{step.schema}': {problem}")
    return {**row, **fields}


def wrap(step: SagaStep, check_emits: Callable[[SagaStep, list[str]], None] | None = None,
         ) -> Callable[[Any, Any], Outcome | None]:
    """The function the underlying :class:`safebunny.Step` calls: parse, then the user's handler;
    ``check_emits(step, types)`` sees the types of each outcome's emits."""
    def checked(outcome: Outcome | None) -> Outcome | None:
        if outcome is not None and check_emits is not None and outcome.emits:
            check_emits(step, [e.type for e in outcome.emits])
        return outcome

    if step.rows:
        def per_row(row: dict[str, Any], ctx: Any) -> Outcome | None:
            return checked(step.handler(parse_row(step, row), ctx))

        return per_row

    def per_batch(batch: Any, ctx: Any) -> Outcome | None:
        # parsed on the driver already (body_arrow.prepare_bodies), or parsed here by Spark
        good, bad = (batch, []) if ctx.prepared else parse_frames(step, batch)
        outcome = checked(step.handler(good, ctx)) or Outcome()
        outcome.failed = [*outcome.failed, *bad]
        return outcome

    return per_batch
