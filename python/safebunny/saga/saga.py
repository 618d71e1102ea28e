"""``safebunny.Saga``: a saga as chained streaming queries, one exactly-once step per query."""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from safebunny.amqp import topology
from safebunny.errors import SafeBunnyOptionError
from safebunny.exactly_once import Inbox, Step
from safebunny.exactly_once.outcome import Emit
from safebunny.ids import correlation_id_for, message_id
from safebunny.saga import breaker, parked
from safebunny.saga.definition import SagaStep, wrap
from safebunny.saga.failures import FailureRouter
from safebunny.saga.retry import Retry
from safebunny.session import publish
from safebunny.uri import validate_uri, with_password

__all__ = ["Saga", "StepStatus", "TraceEntry"]


@dataclass(frozen=True)
class StepStatus:
    """One step's state (``saga.status()``); ``None`` where the broker did not answer for a queue."""

    node: str
    type: str
    query: str
    backlog: int | None
    retrying: int | None
    poisoned: int
    batches: int
    received: int
    processed: int
    duplicates: int
    failed: int
    retried: int
    parked: int
    input_rate: float | None
    last_batch: str | None
    breaker: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Saga:
    """A saga named ``name`` on the broker at ``uri``, with checkpoints, journals, the inbox and control files
    under ``root``. ``retry`` sets the retry tiers; consumer queues are quorum queues with an explicit
    ``delivery_limit`` unless ``quorum=False``."""

    def __init__(self, name: str, uri: str, root: str, retry: Retry | None = None, *, password: str | None = None,
                 quorum: bool = True, delivery_limit: int = 50, batch_size: int = 1000) -> None:
        self.name = topology.check_name("saga", name)
        self.uri = validate_uri(uri, "uri")
        self.password = password
        self.root = root if "://" in root else os.path.abspath(root)
        self.retry = retry or Retry()
        self.quorum = quorum
        if delivery_limit < 1 or batch_size < 1:
            raise SafeBunnyOptionError(
                f"delivery_limit and batch_size must be >= 1; got {delivery_limit} and {batch_size}.", "delivery_limit")
        self.delivery_limit = delivery_limit
        self.batch_size = batch_size
        self.steps: list[SagaStep] = []
        self._runtimes: dict[str, Step] = {}
        self._failures: dict[str, FailureRouter] = {}

    # -- definition ------------------------------------------------------------------------------
    def step(self, node: str, consumes: str, from_node: str, schema: str, produces: Sequence[str] = (),
             rows: bool = False, compensates: str | None = None, fails_as: str | None = None,
             batch_size: int | None = None) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorator: ``handler`` runs for messages of type ``consumes`` that ``from_node`` sends to ``node``.
        ``fails_as``: publish a message of this type when a message is poisoned (for compensation steps)."""
        def register(handler: Callable[..., Any]) -> Callable[..., Any]:
            definition = SagaStep(node, consumes, from_node, schema, handler, tuple(produces), rows, compensates,
                                  fails_as, batch_size or self.batch_size)
            if any(s.label == definition.label for s in self.steps):
                raise SafeBunnyOptionError(f"Saga {self.name!r} already has a step {definition.label!r}.", "node")
            self.steps.append(definition)
            return handler

        return register

    def step_of(self, node: str, message_type: str) -> SagaStep:
        for s in self.steps:
            if s.node == node and s.consumes == message_type:
                return s
        known = ", ".join(s.label for s in self.steps) or "none"
        raise SafeBunnyOptionError(f"Saga {self.name!r} has no step {node}.{message_type}; its steps: {known}.",
                                   "step")

    # -- plumbing shared by the runner, the CLI and tests ----------------------------------------
    @property
    def connection_uri(self) -> str:
        return with_password(self.uri, self.password)

    @property
    def inbox_path(self) -> str:
        return os.path.join(self.root, "inbox")

    def pause_file(self, node: str, message_type: str) -> str:
        return breaker.pause_path(self.root, node, message_type)

    def runtime(self, step: SagaStep) -> Step:
        """The exactly-once :class:`Step` behind a saga step (one per step, kept for status)."""
        if step.label not in self._runtimes:
            self._failures[step.label] = FailureRouter(self, step)
            self._runtimes[step.label] = Step(step.node, self.inbox_path, self.uri, self.password,
                                              on_failed=self._failures[step.label], router=self._route(step.node))
        return self._runtimes[step.label]

    def handler_of(self, step: SagaStep) -> Callable[..., Any]:
        return wrap(step)

    def _route(self, node: str) -> Callable[[Emit], tuple[str, str]]:
        exchange = topology.exchange_name(self)
        return lambda item: (exchange, topology.routing_key(node, item.type))

    def moved(self) -> int:
        """Messages received by this process's steps so far (drain's progress measure)."""
        return sum(r.received for s in self._runtimes.values() for r in s.reports)

    def waiting(self) -> int:
        """Messages ready in the step queues and retry tiers."""
        topo = topology.plan(self)
        names = [q.name for q in topo.queues if q.role in ("consumer", "retry")]
        return sum(d[0] for d in topology.depths(self, names).values() if d is not None)

    # -- running ---------------------------------------------------------------------------------
    def declare(self) -> topology.Topology:
        """Declare the topology (idempotent; a queue with other arguments is a clear error)."""
        return topology.declare(self)

    def start(self, df: Any, node: str, type: str, business_key: str) -> None:  # noqa: A002
        """Publish the first messages of saga instances: one per row of ``df``, with the message id and
        correlation id derived from the ``business_key`` column, so starting the same instance twice
        starts it once. The body is the row as a JSON object."""
        from pyspark.sql import functions as F
        from pyspark.sql.types import StringType

        if business_key not in df.columns:
            raise SafeBunnyOptionError(
                f"saga.start(business_key={business_key!r}): no such column; columns: {df.columns}.", "business_key")
        self.declare()
        corr = F.udf(lambda k: correlation_id_for(str(k)), StringType())
        mid = F.udf(lambda k: message_id(correlation_id_for(str(k)), node, type, 0), StringType())
        out = df.select(F.to_json(F.struct(*df.columns)).alias("value"),
                        mid(F.col(business_key)).alias("messageId"), corr(F.col(business_key)).alias("correlationId"),
                        F.lit(type).alias("type"), F.lit("application/json").alias("contentType"))
        options = {"uri": self.uri, "exchange": topology.exchange_name(self),
                   "routingKey": topology.routing_key(node, type)}
        if self.password is not None:
            options["password"] = self.password
        publish(out, **options)

    def run(self, spark: Any, trigger: str = "1 second") -> Any:
        """Start every step as its own streaming query; returns a handle with ``stop()``."""
        from safebunny.saga.runner import RunningSaga

        self.declare()
        return RunningSaga(spark, self, trigger)

    def drain(self, spark: Any, timeout: float = 600.0, on_round: Any = None, restarts: int = 2) -> int:
        """Run availableNow rounds until nothing moves and no retry tier holds a message; the rounds run.
        A step whose query fails starts again from its checkpoint in the next round; after ``restarts``
        failures of one step in a row, its error is raised."""
        from safebunny.saga.runner import drain

        self.declare()
        return drain(spark, self, timeout, on_round, restarts)

    def pause(self, node: str, type: str, seconds: float) -> float:  # noqa: A002
        """Pause step ``node.type`` for ``seconds`` without stopping its query; it resumes by itself."""
        self.step_of(node, type)
        return breaker.pause(self.root, node, type, seconds)

    def resume(self, node: str, type: str) -> None:  # noqa: A002
        breaker.resume(self.root, node, type)

    # -- watching --------------------------------------------------------------------------------
    def status(self) -> list[StepStatus]:
        """One :class:`StepStatus` per step: broker depths, this process's batch counters, the breaker."""
        topo = topology.plan(self)
        depth = topology.depths(self, [q.name for q in topo.queues])
        out = []
        for s in self.steps:
            reports = list(self._runtimes[s.label].reports) if s.label in self._runtimes else []
            counts = self._failures[s.label].counts if s.label in self._failures else {}
            backlog = depth.get(topology.queue_name(self, s.node, s.consumes))
            retry_depths = [depth.get(q.name) for q in topo.queues if q.role == "retry" and q.step == s.label]
            rate = None
            if len(reports) >= 2:
                span = (reports[-1].finished_at - reports[0].finished_at).total_seconds()
                rate = sum(r.received for r in reports[1:]) / span if span > 0 else None
            until = breaker.paused_until(self.pause_file(s.node, s.consumes))
            out.append(StepStatus(
                s.node, s.consumes, f"{self.name}.{s.label}", None if backlog is None else backlog[0],
                None if any(d is None for d in retry_depths) else sum(d[0] for d in retry_depths),
                len(self.poison_rows(s.node, s.consumes)) if backlog is not None else 0,
                len(reports), sum(r.received for r in reports), sum(r.processed for r in reports),
                sum(r.duplicates for r in reports),
                sum(r.failed for r in reports), counts.get("retried", 0), counts.get("poisoned", 0), rate,
                reports[-1].finished_at.isoformat() if reports else None,
                "closed" if until is None else
                f"open until {dt.datetime.fromtimestamp(until, dt.timezone.utc).isoformat(timespec='seconds')}"))
        return out

    def trace(self, correlation_id: str) -> list[TraceEntry]:
        """The path of one saga instance through the steps' inboxes, in processing order. Takes a
        correlation id or a business key (the key's derived correlation id is tried too)."""
        inbox = Inbox(self.inbox_path, "trace")
        rows = inbox.rows(correlation_id, all_nodes=True).to_pylist()
        if not rows:
            rows = inbox.rows(correlation_id_for(correlation_id), all_nodes=True).to_pylist()
        rows.sort(key=lambda r: (r["processedAt"], r["node"]))
        return [TraceEntry(r["node"], r.get("type"), r["messageId"], r["causationId"], r["status"], r["reason"],
                           r["attempts"], list(r["emitted"] or []), r["batchId"], r["processedAt"].isoformat())
                for r in rows]

    def poison_rows(self, node: str, type: str) -> list[parked.Parked]:  # noqa: A002
        """The messages parked in step ``node.type``'s poison queue (no Spark needed)."""
        self.step_of(node, type)
        return parked.read_parked(self, node, type)

    def poison(self, node: str, type: str, spark: Any = None) -> Any:  # noqa: A002
        """The parked messages of step ``node.type`` as a DataFrame in the active (or given) session."""
        from pyspark.sql import SparkSession

        session = spark or SparkSession.getActiveSession()
        if session is None:
            raise SafeBunnyOptionError("saga.poison(...) needs a SparkSession; use saga.poison_rows(...) "
                                       "without Spark.", "spark")
        rows = [p.to_dict() for p in self.poison_rows(node, type)]
        schema = ("step string, offset long, messageId string, correlationId string, type string, reason string, "
                  "errorType string, attempts int, firstFailure string, parkedAt string, body string")
        return session.createDataFrame(rows, schema)

    def redrive(self, node: str, type: str, ids: Sequence[str] | None = None) -> int:  # noqa: A002
        """Republish parked messages of step ``node.type`` (all, or ``ids``) to its queue after a fix;
        idempotent, as the inbox drops what already succeeded. Returns how many were republished."""
        self.step_of(node, type)
        return parked.redrive(self, node, type, list(ids) if ids is not None else None)
