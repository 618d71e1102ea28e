"""A saga as chained streaming queries, one exactly-once step per query (the ``safebunny.Saga`` facade).

The facade: the definition (:meth:`Saga.step`, :meth:`Saga.check`, :meth:`Saga.declare`) and each step's
exactly-once Step; running, status, poison, instances and trace live in their own modules, which read the
saga's :class:`~safebunny.saga.define.config.SagaConfig` (settings and every path under the root).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from safebunny.errors import SafeBunnyOptionError, moved_keywords
from safebunny.exactly_once import BatchReport, Step, StepSettings
from safebunny.options.connection import ConnectionSettings
from safebunny.saga.define import definition, topology
from safebunny.saga.define.config import SagaConfig, SagaLayout, SagaSettings
from safebunny.saga.define.definition import SagaStep, wrap
from safebunny.saga.look import instances, parked, trace
from safebunny.saga.look.status import StepStatus, shard_status, status_fields
from safebunny.saga.look.trace import TraceEntry
from safebunny.saga.run.failures import FailureRouter
from safebunny.saga.run.reports import ReportStore
from safebunny.storage.pause import clear_pause, write_pause

if TYPE_CHECKING:
    from safebunny.saga.look.view import SagaView

__all__ = ["Saga", "StepStatus", "TraceEntry"]


#: the keywords ``Saga`` took before its settings were one SagaSettings, each answered with its new form
_SETTINGS_KEYWORDS = ("retry", "quorum", "delivery_limit", "batch_size", "strict", "management_url", "poison_max_age",
                      "unrouted_max_age", "driver", "executor_publish_rows", "executor_partition_rows", "checkpoints")


@moved_keywords({k: f"Saga(name, uri, root, SagaSettings({k}=...))" for k in _SETTINGS_KEYWORDS})
class Saga:
    """A saga named ``name`` on the broker at ``uri``, with checkpoints, journals, the inbox and control files
    under ``root``: ``Saga(name, uri, root, settings, password=...)``, every other setting a keyword of
    ``settings``, a :class:`~safebunny.saga.define.config.SagaSettings` (e.g. ``SagaSettings(batch_size=500)``), all
    kept in :attr:`config` (a :class:`~safebunny.saga.define.config.SagaConfig`). A password inside ``uri`` is kept
    apart from it (as ``password``, which also takes it directly), so the queries' plans never show it.
    The settings: ``retry`` sets the retry tiers; consumer queues are quorum queues with an explicit
    ``delivery_limit`` unless ``quorum=False``; ``batch_size`` is each step's default; ``strict=True`` turns the
    definition checks' warnings into errors; ``management_url`` and ``poison_max_age`` in docs/operations.md;
    ``unrouted_max_age``, ``driver``, ``executor_publish_rows``/``executor_partition_rows`` and
    ``record_frame_outcomes`` (each step's :class:`~safebunny.exactly_once.StepSettings`) in docs/sagas.md;
    ``checkpoints`` and ``tables`` (every Delta table of the saga by name in that schema, its root then a Unity
    Catalog volume or any folder of plain files) in docs/databricks.md."""

    def __init__(self, name: str, uri: str, root: str, settings: SagaSettings | None = None, *,
                 password: str | None = None) -> None:
        settings = SagaSettings() if settings is None else settings
        if not isinstance(root, str) or not root.strip():  # "" would become the working directory
            raise SafeBunnyOptionError(
                f"Saga's root must name where the saga keeps its state, but got {root!r}; give a path or URI, "
                "e.g. Saga(name, uri, root='/data/sagas/shop') (on Databricks, a volume: /Volumes/...).", "root")
        if not isinstance(settings, SagaSettings):  # the fourth argument was the retry tiers in earlier releases
            raise SafeBunnyOptionError(
                f"Saga's settings must be a safebunny.SagaSettings, but got a {type(settings).__name__}; "
                "write Saga(name, uri, root, SagaSettings(retry=..., ...)).", "settings")
        layout = SagaLayout(root, settings.driver, settings.checkpoints, settings.tables, name)
        self.config = SagaConfig(name, ConnectionSettings(uri, password), layout, settings)
        self.steps: list[SagaStep] = []
        self._runtimes: dict[str, Step] = {}
        self._started: set[tuple[str, str]] = set()
        self._warned: set[str] = set()

    @property
    def name(self) -> str:
        """The saga's name."""
        return self.config.name

    @property
    def password(self) -> str | None:
        """The broker's password, kept out of ``uri``."""
        return self.config.connection.password

    @property
    def connection_uri(self) -> str:
        """The broker's URI with the password."""
        return self.config.connection.login_uri

    @property
    def inbox_path(self) -> str:
        """The steps' inbox (a Delta table: a path under the root, or a name with ``SagaSettings(tables=...)``)."""
        return self.config.layout.inbox

    @property
    def uri(self) -> str:
        """The broker's URI, without its password (see ``password`` and :attr:`connection_uri`)."""
        return self.config.connection.uri

    @uri.setter
    def uri(self, value: str) -> None:
        self.config = replace(self.config, connection=self.config.connection.with_uri(value))

    # -- definition ------------------------------------------------------------------------------
    def step(self, node: str, consumes: str, from_node: str, schema: Any, produces: Sequence[str] = (),
             rows: bool = False, compensates: str | None = None, fails_as: str | None = None,
             batch_size: int | None = None, strict_schema: bool = True, shards: int | None = None,
             ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorator: ``handler`` runs for messages of type ``consumes`` that ``from_node`` sends to ``node``.
        ``schema`` (DDL text or a ``StructType``) is parsed here: a typo fails at once, naming the step.
        ``fails_as``: publish a message of this type when a message is poisoned (for compensation steps).
        ``strict_schema=False`` coerces body fields to the schema's types instead of parking the message
        (docs/sagas.md, "Step schemas are strict"). ``shards``: split the step's input into this many queues
        (1 to 64) by saga instance (docs/sagas.md, "Sharded steps and several drivers")."""
        def register(handler: Callable[..., Any]) -> Callable[..., Any]:
            definition = SagaStep(node, consumes, from_node, schema, handler, tuple(produces), rows, compensates,
                                  fails_as, batch_size or self.config.settings.batch_size, strict_schema, shards)
            if any(s.label == definition.label for s in self.steps):
                raise SafeBunnyOptionError(f"Saga {self.name!r} already has a step {definition.label!r}.", "node")
            self.steps.append(definition)
            return handler

        return register

    def units(self) -> list[SagaStep]:
        """What runs as one query each: every step, a sharded step once per shard."""
        return [unit for s in self.steps for unit in s.units()]

    def step_of(self, node: str, message_type: str) -> SagaStep:
        for s in self.steps:
            if s.node == node and s.consumes == message_type:
                return s
        known = ", ".join(s.label for s in self.steps) or "none"
        raise SafeBunnyOptionError(f"Saga {self.name!r} has no step {node}.{message_type}; its steps: {known}.",
                                   "step")

    def check(self) -> list[str]:
        """The definition's problems (routes no step feeds); warned once each, or raised when ``strict``.
        ``declare``, ``run`` and ``drain`` call it."""
        problems = definition.unfed_routes(self.steps, self._started)
        self._report(problems)
        if self.config.layout.driver is not None:
            definition.require_shards(self.name, self.config.layout.driver, self.steps)
        return problems

    def _check_emits(self, step: SagaStep, types: list[str]) -> None:
        self._report(definition.undeclared_emits(step, types))

    def _report(self, problems: list[str]) -> None:
        """Warn about each of the definition's ``problems`` once, or raise them with ``strict``."""
        definition.report_problems(self.name, problems, self.config.settings.strict, self._warned)

    def declare(self) -> topology.Topology:
        """Check the definition (:meth:`check`) and declare the topology (idempotent; a queue with other
        arguments is a clear error)."""
        self.check()
        return topology.declare(self)

    # -- each step's exactly-once Step -----------------------------------------------------------
    def runtime(self, step: SagaStep) -> Step:
        """The exactly-once :class:`Step` behind a saga step's query (one per step or shard, kept for status);
        the shards of a step share its inbox (one node's)."""
        label, config = step.unit_label, self.config
        if label not in self._runtimes:
            failures = FailureRouter(self, step)
            self._runtimes[label] = Step(step.node, config.layout.inbox, StepSettings(
                connection=config.connection.named(config.connection_name("publisher", label)),
                on_failed=failures, router=topology.router(self, step.node),
                # the step reads its epoch in the checkpoint over Spark Connect; a shard's query has its own
                checkpoint=config.layout.checkpoint(label), journal=config.layout.journal(label),
                state=config.layout.state,
                **config.settings.executor_publishing(),
                record_frame_outcomes=config.settings.record_frame_outcomes,
                prepare=None if step.rows else step.body.prepare, skip=failures.parked_ids.fresh_copies,
                parked=failures.parked_ids.recorded, parks=failures.parkings))
        return self._runtimes[label]

    def handler_of(self, step: SagaStep) -> Callable[..., Any]:
        """Step ``step``'s handler as its query runs it (emits checked against ``produces``)."""
        return wrap(step, self._check_emits)

    def reports_of(self, step: SagaStep) -> list[BatchReport]:
        """Step ``step``'s recent batches with messages (of all its shards, or of one shard's query), oldest first,
        as stored under ``root`` by whichever process ran them (:mod:`safebunny.saga.run.reports`)."""
        units = step.units() if step.shard is None else [step]
        return sorted((r for u in units for r in ReportStore(self.config.layout.root, u.unit_label).reports()),
                      key=lambda r: r.finished_at)

    # -- running ---------------------------------------------------------------------------------
    def start(self, df: Any, node: str, type: str, business_key: str) -> None:  # noqa: A002
        """Publish the first messages of saga instances: one per row of ``df``, with the message id and
        correlation id derived from the ``business_key`` column, so starting the same instance twice
        starts it once. The body is the row as a JSON object. Rows whose key is null or blank are refused
        (before anything is published): they would all become one instance."""
        instances.check_keys(df, business_key)
        self._started.add((node, type))
        self._report(definition.unconsumed_start(self.steps, node, type))
        self.declare()
        instances.publish_first(self, df, node, type, business_key)
        instances.record_started(self.config, df, business_key, node, type)  # the business keys, for instances()

    def run(self, spark: Any, trigger: str = "1 second", balance: bool = True) -> Any:
        """Start every step as its own streaming query; returns a handle with ``stop()``
        (:class:`~safebunny.saga.run.runner.RunningSaga`). ``trigger``: a processing-time interval (``"1 second"``), or
        ``"availableNow"`` for rounds of availableNow queries (Databricks serverless). Among several drivers,
        ``balance=False`` leaves every shard with the first driver to attach (docs/sagas.md, "Sharded steps and
        several drivers")."""
        from safebunny.saga.run.runner import RunningSaga

        self.declare()
        return RunningSaga(spark, self, trigger, balance=balance)

    def drain(self, spark: Any, timeout: float = 600.0, restarts: int = 2) -> int:
        """Run availableNow rounds until nothing moves and no retry tier holds a message; the rounds run.
        A step whose query fails starts again from its checkpoint in the next round; after ``restarts``
        failures of one step in a row, its error is raised."""
        from safebunny.saga.run.drain import drain

        self.declare()
        return drain(spark, self, timeout, restarts)

    def pause(self, node: str, type: str, seconds: float) -> float:  # noqa: A002
        """Pause step ``node.type`` for ``seconds`` without stopping its query; it resumes by itself."""
        self.step_of(node, type)
        return write_pause(self.config.layout.pause_file(node, type), seconds)

    def resume(self, node: str, type: str) -> None:  # noqa: A002
        clear_pause(self.config.layout.pause_file(node, type))

    # -- watching --------------------------------------------------------------------------------
    def status(self) -> list[StepStatus]:
        """One :class:`StepStatus` per step, the same in any process: broker depths, unacked (management
        API), the counters each batch recorded under the root (:mod:`safebunny.saga.run.reports`), the breaker."""
        return [StepStatus(**fields) for fields, _ in status_fields(self)]

    def shards(self) -> list[Any]:
        """One :class:`~safebunny.saga.look.status.ShardStatus` per shard of each sharded step: backlog, whether a
        driver holds it, the driver of its last batch and how long ago (from any process)."""
        return shard_status(self)

    def trace(self, correlation_id: str) -> list[TraceEntry]:
        """The path of one saga instance through the steps' inboxes, in processing order. Takes a
        correlation id or a business key (the key's derived correlation id is tried too); a parked message's
        last entry says ``parked`` (:mod:`safebunny.saga.look.trace`)."""
        return trace.trace(self, correlation_id)

    def instances(self, spark: Any = None, state: str | None = None) -> Any:
        """One row per saga instance (business key, correlation id, state, current or last step, started,
        last update, steps done) as a DataFrame in the active (or given) session, also registered as the
        SQL view ``<saga name>_instances`` (``-`` as ``_``). ``state``: ``running``, ``retrying``,
        ``parked``, ``compensated`` or ``completed`` (see :mod:`safebunny.saga.look.instance_state`)."""
        return instances.instances_frame(self, spark, state)

    def poison_rows(self, node: str, type: str, all: bool = False) -> list[parked.Parked]:  # noqa: A002
        """The messages parked in step ``node.type``'s poison queue (no Spark needed), each with its
        ``state``; resolved (redriven, then processed) and discarded ones only with ``all=True``."""
        self.step_of(node, type)
        return parked.read_parked(self.config, node, type, all)

    def poison(self, node: str, type: str, spark: Any = None, all: bool = False) -> Any:  # noqa: A002
        """The parked messages of step ``node.type`` as a DataFrame in the active (or given) session
        (``all``: also the resolved and discarded ones)."""
        return parked.parked_frame(self.poison_rows(node, type, all), spark)

    def redrive(self, node: str, type: str, ids: Sequence[str] | None = None,  # noqa: A002
                force: bool = False, error_type: str | None = None) -> int:
        """Republish parked messages of step ``node.type`` (all, ``ids``, or those that failed with
        ``error_type``, e.g. ``"MalformedMessage"``) to its queue after a fix; idempotent, as the inbox
        drops what already succeeded; discarded messages are skipped. Returns how many were republished.
        A step with ``fails_as`` already compensated its parked messages' instances: redriving them is
        refused unless ``force=True``."""
        step = self.step_of(node, type)
        return parked.redrive(self.config, step, list(ids) if ids is not None else None, force, error_type)

    def discard(self, node: str, type: str, ids: Sequence[str], reason: str) -> int:  # noqa: A002
        """Give up on parked messages of step ``node.type`` on purpose: recorded with ``reason``, who and
        when (the step's poison ledger under ``root``), hidden from ``poison_rows`` and never redriven.
        Returns how many of ``ids`` were found parked."""
        self.step_of(node, type)
        return parked.discard(self.config, node, type, list(ids), reason)

    def view(self, instance: str | None = None) -> SagaView:
        """The saga as one self-contained HTML page (:class:`~safebunny.saga.look.view.SagaView`, a ``str``): its graph,
        per step its status, rates, last batch, restarts and driver, instances by state with the oldest stuck
        ones, the poison list, and with ``instance`` (a correlation id or business key) that instance's trace as
        a timeline. Built from the saga's durable state and the broker, as :meth:`status` is, so it works from
        any process; ``displayHTML(saga.view())`` on Databricks, rich output in Jupyter (docs/operations.md)."""
        from safebunny.saga.look.view import view

        return view(self, instance)
