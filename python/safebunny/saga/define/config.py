"""A saga's settings and storage layout as frozen values, and what the saga modules read of a saga.

:class:`SagaLayout` (every path under the root, each named once here), :class:`SagaSettings` (what
``SagaSettings(settings=...)`` is told by keyword), :class:`SagaConfig` (the name, broker, layout and settings),
and the protocols :class:`SagaShape` and :class:`SagaRunner` that the saga modules read instead of a whole saga.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from safebunny.errors import SafeBunnyMovedError, SafeBunnyOptionError, moved_keywords
from safebunny.exactly_once.emits.retrying_publisher import ExecutorPublishing
from safebunny.options.connection import ConnectionSettings
from safebunny.saga.define.names import check_name
from safebunny.saga.define.retry import Retry
from safebunny.storage.location import absolute_location
from safebunny.storage.volumes import refuse_volume

if TYPE_CHECKING:
    from safebunny.exactly_once import Step
    from safebunny.saga.define.definition import SagaStep

__all__ = ["SagaLayout", "SagaSettings", "SagaConfig"]


def _max_age(option: str, value: str | None, what: str) -> str | None:
    """A stream's retention as RabbitMQ's ``x-max-age`` (``"30D"``, ``"12h"``), or None to keep for ever."""
    if value is not None and not re.fullmatch(r"[1-9]\d*[YMDhms]", str(value)):
        raise SafeBunnyOptionError(
            f"{option} must be a number and a unit of Y, M, D, h, m or s (RabbitMQ's x-max-age), e.g. "
            f"'30D' or '12h', or None to keep {what} for ever; got {value!r}.", option)
    return value


def _schema(value: str | None) -> str | None:
    """``SagaSettings(tables=...)``: a schema as ``catalog.schema`` (Unity Catalog) or ``schema``, or None."""
    if value is not None and not re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)?", str(value)):
        raise SafeBunnyOptionError(
            "tables must name the schema that holds the saga's Delta tables, as 'catalog.schema' (Unity Catalog, "
            f"e.g. 'main.sagas') or 'schema', letters, digits and '_' only; got {value!r}.", "tables")
    return value


@dataclass(frozen=True)
class SagaLayout:
    """Where a saga keeps its state under ``root``: the one place that names these paths. ``driver``: this
    process's name among several drivers (its checkpoints and journals live under ``root/drivers/<driver>``);
    ``checkpoints``: another home for the steps' Spark checkpoints (``<checkpoints>/<driver>/<step>`` among
    several drivers); ``tables``: the schema that holds the saga's Delta tables by name (``<tables>.<saga>_inbox``,
    ...; ``saga``: the saga's name), whose root then holds plain files only and may be a Unity Catalog volume."""

    root: str
    driver: str | None = None
    checkpoints: str | None = None
    tables: str | None = None
    saga: str = "saga"

    def __post_init__(self) -> None:
        if _schema(self.tables) is None:  # a delta-rs inbox under the root: never on a volume
            refuse_volume(self.root, "The saga's root", "root")  # before anything is written under it
        object.__setattr__(self, "root", absolute_location(self.root))
        if self.driver is not None:
            check_name("driver", self.driver)
        if self.checkpoints is not None:
            object.__setattr__(self, "checkpoints", absolute_location(self.checkpoints))

    def _under(self, *parts: str) -> str:
        return os.path.join(self.root, *parts)

    @property
    def own_root(self) -> str:
        """What belongs to this driver alone: the root, or ``root/drivers/<driver>`` among several."""
        return self.root if self.driver is None else self._under("drivers", self.driver)

    def _table(self, kind: str) -> str:
        """The saga's Delta table ``kind``: by name in ``tables``, or a folder under the root."""
        if self.tables is None:
            return self._under(kind)
        return f"{self.tables}.{re.sub(r'[^A-Za-z0-9_]', '_', self.saga)}_{kind}"

    @property
    def inbox(self) -> str:
        """The steps' inbox (one Delta table, every node's)."""
        return self._table("inbox")

    @property
    def state(self) -> str | None:
        """The steps' claims and outcome logs with an inbox by name (``root/state``); else None, the inbox's folder
        (their row decisions: a Delta table beside the inbox, :attr:`Inbox.decisions`)."""
        return None if self.tables is None else self._under("state")

    @property
    def started(self) -> str:
        """The started records ``saga.start`` appends (:mod:`safebunny.saga.look.instances`)."""
        return self._table("started")

    @property
    def leases(self) -> str:
        """The folder of the drivers' lease files (:mod:`safebunny.saga.run.leases`)."""
        return self._under("drivers", "_leases")

    def checkpoint(self, unit_label: str) -> str:
        """The Spark checkpoint of one step's (or shard's) query: the driver's own. Two drivers on one checkpoint
        would share one epoch, and a batch id the other used reads as done there (its effects and marker skipped),
        so a ``checkpoints`` home keeps a folder per driver too; without a driver, the home itself."""
        if self.checkpoints is None:
            return os.path.join(self.own_root, "checkpoints", unit_label)
        return os.path.join(self.checkpoints, *([self.driver] if self.driver else []), unit_label)

    def journal(self, unit_label: str) -> str:
        """Where one step's (or shard's) query journals its batches."""
        return os.path.join(self.own_root, "journal", unit_label)

    def pause_file(self, node: str, message_type: str) -> str:
        """Step ``node.type``'s pause file, the source's ``pauseFile`` (:mod:`safebunny.storage.pause`): a time
        written there pauses the step's consumption until then, without stopping its query."""
        return self._under("control", f"{node}.{message_type}.pause")

    def drain_gate(self, drain: str, layer: int) -> str:
        """The file one round of a drain writes once every step before graph layer ``layer`` has ended, the
        source's ``availableNowAwaitFile`` for that layer's steps (:mod:`safebunny.saga.run.drain`)."""
        return os.path.join(self.own_root, "control", "drain", f"{drain}.layer-{layer}")

    def poison_ledger(self, label: str) -> str:
        """Step ``label``'s ledger of redriven and discarded messages
        (:class:`~safebunny.saga.look.parked.PoisonLedger`)."""
        return self._under("poison", f"{label}.json")

    def parked_ids(self, unit_label: str) -> str:
        """The file where an older version kept one query's parking decisions: read, honoured, never written (they
        are committed to the step's decision table now, :mod:`safebunny.saga.run.parked_ids`)."""
        return self._under("poison", f"{unit_label}.parked.json")


@dataclass(frozen=True)
class SagaSettings(ExecutorPublishing):
    """Everything a :class:`safebunny.Saga` is told besides its name, broker and root, by keyword, checked when
    made: ``Saga("fulfilment", uri, root, SagaSettings(batch_size=500, driver="host-a"))`` (each setting is
    documented on :class:`safebunny.Saga`); one value may serve several sagas."""

    retry: Retry = field(default_factory=Retry)
    quorum: bool = True
    delivery_limit: int = 50
    batch_size: int | None = None
    strict: bool = False
    management_url: str | None = None
    poison_max_age: str | None = "30D"
    unrouted_max_age: str | None = "7D"
    driver: str | None = None
    checkpoints: str | None = None
    tables: str | None = None
    record_frame_outcomes: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        _schema(self.tables)
        _max_age("poison_max_age", self.poison_max_age, "parked messages")
        _max_age("unrouted_max_age", self.unrouted_max_age, "unrouted messages")
        if self.delivery_limit < 1 or (self.batch_size is not None and self.batch_size < 1):
            raise SafeBunnyOptionError(f"delivery_limit and batch_size must be >= 1 (batch_size None: batches "
                                       f"that grow with the backlog); got {self.delivery_limit} and "
                                       f"{self.batch_size}.", "delivery_limit")


_CONFIG = "SagaConfig(name, ConnectionSettings(uri, password), layout, settings)"
#: SagaConfig's attributes of earlier releases -> where each is now
_MOVED_ATTRIBUTES = {"uri": "config.connection.uri", "password": "config.connection.password",
                     "connection_uri": "config.connection.login_uri"}


@moved_keywords({"uri": _CONFIG, "password": _CONFIG})
@dataclass(frozen=True)
class SagaConfig:
    """A saga: its name, broker (``connection``), storage layout and :class:`SagaSettings`, checked when made."""

    name: str
    connection: ConnectionSettings
    layout: SagaLayout
    settings: SagaSettings = field(default_factory=SagaSettings)

    def __post_init__(self) -> None:
        check_name("saga", self.name)
        if not isinstance(self.connection, ConnectionSettings):  # the URI, in earlier releases
            raise SafeBunnyOptionError(f"SagaConfig's broker must be a safebunny.ConnectionSettings, but got a "
                                       f"{type(self.connection).__name__}; write {_CONFIG} (CHANGELOG.md).",
                                       "connection")

    def __getattr__(self, name: str) -> Any:  # only for a name the instance and its class do not have
        if name in _MOVED_ATTRIBUTES:
            raise SafeBunnyMovedError(f"SagaConfig.{name} is gone (CHANGELOG.md): read {_MOVED_ATTRIBUTES[name]}.")
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def connection_name(self, role: str, unit_label: str | None = None) -> str:
        """The client-provided name of a connection this saga opens (RabbitMQ shows it):
        ``safebunny/<saga>[/<driver>][/<step or shard>]/<role>``, e.g.
        ``safebunny/fulfilment/host-a/stock.OrderPlaced.shard.1/consumer``."""
        driver = self.layout.driver
        return "/".join(["safebunny", self.name, *([driver] if driver else []), *([unit_label] if unit_label else []),
                         role])


class SagaShape(Protocol):
    """A saga's settings and steps: what the topology, status and balancing read."""

    @property
    def config(self) -> SagaConfig: ...

    @property
    def steps(self) -> Sequence[SagaStep]: ...

    def units(self) -> list[SagaStep]: ...


class SagaRunner(SagaShape, Protocol):
    """What running a saga's queries needs besides: each step's exactly-once Step, failure router and handler."""

    def runtime(self, step: SagaStep) -> Step: ...

    def handler_of(self, step: SagaStep) -> Callable[..., Any]: ...
