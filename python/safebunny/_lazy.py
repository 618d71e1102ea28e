"""Names a package re-exports, imported on first use (PEP 562).

A package lists its re-exports in ``_LAZY`` (name -> defining module) instead of importing its whole public
API, so a process that needs one module (Spark's source runner, each Python worker) does not load the
inbox's pandas and pyarrow.dataset (docs/design.md, Layout; docs/performance.md).
``tests/unit/test_layout.py`` checks those modules against the dependency rules as if they were imports.
The modules and names of earlier releases that moved are answered by :class:`~safebunny.errors.SafeBunnyMovedError`
naming the new place (:data:`MOVED`, :func:`refuse_moved`; CHANGELOG.md lists them).
"""

from __future__ import annotations

import importlib
import importlib.abc
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["exports", "MOVED", "refuse_moved"]

#: module paths that moved -> where each is now (CHANGELOG.md); importing an old path raises our error naming it, and
#: a package's modules move with it (``safebunny.source.consumer`` is ``safebunny.queues.consumer``)
MOVED = {f"safebunny.saga.{module}": f"safebunny.saga.{room}.{module}" for room, modules in (
    ("define", ("bodies", "config", "definition", "graph", "names", "retry", "topology")),
    ("run", ("drain", "failures", "leases", "parked_ids", "queries", "reports", "republish", "runner")),
    ("look", ("instance_state", "instances", "metrics", "parked", "status", "trace", "view", "view_html")),
) for module in modules}
MOVED.update({
    "pyspark_safebunny.stream_reader": "pyspark_safebunny.microbatch_reader",
    "safebunny.amqp.ack_budget": "safebunny.queues.ack_budget",
    "safebunny.amqp.consumer": "safebunny.queues.consumer",
    "safebunny.amqp.frames": "safebunny.amqp.frame_decode",
    "safebunny.amqp.probe": "safebunny.streams.probe",
    "safebunny.amqp.publisher": "safebunny.amqp.confirming_publisher",
    "safebunny.amqp.topology": "safebunny.saga.define.topology",
    "safebunny.atomic": "safebunny.storage.writes",
    "safebunny.connection": "safebunny.amqp.connection",
    "safebunny.connection_options": "safebunny.options.connection",
    "safebunny.consumer": "safebunny.queues.consumer",
    "safebunny.exactly_once.batch": "safebunny.exactly_once.collect.batch",
    "safebunny.exactly_once.connect_epoch": "safebunny.exactly_once.protocol.epoch",
    "safebunny.exactly_once.decisions": "safebunny.exactly_once.inbox.decisions",
    "safebunny.exactly_once.delta_rs": "safebunny.delta.delta_rs",
    "safebunny.exactly_once.emit_publisher": "safebunny.exactly_once.emits.retrying_publisher",
    "safebunny.exactly_once.emits.publisher": "safebunny.exactly_once.emits.retrying_publisher",
    "safebunny.exactly_once.emits.rows": "safebunny.exactly_once.emits.routed_rows",
    "safebunny.exactly_once.fence": "safebunny.exactly_once.claims.fence",
    "safebunny.exactly_once.handlers.frames": "safebunny.exactly_once.handlers.frame_handler",
    "safebunny.exactly_once.handlers.rows": "safebunny.exactly_once.handlers.row_handler",
    "safebunny.exactly_once.inbox.index": "safebunny.delta.seen_index",
    "safebunny.exactly_once.inbox_index": "safebunny.delta.seen_index",
    "safebunny.exactly_once.materialize": "safebunny.exactly_once.collect.materialize",
    "safebunny.exactly_once.merge_rows": "safebunny.delta.merge_rows",
    "safebunny.exactly_once.row_run": "safebunny.exactly_once.handlers.row_handler",
    "safebunny.exactly_once.row_types": "safebunny.exactly_once.handlers.row_types",
    "safebunny.exactly_once.takeover": "safebunny.exactly_once.claims.takeover",
    "safebunny.first_stream": "safebunny.spark.first_stream",
    "safebunny.journal": "safebunny.queues.journal",
    "safebunny.journal_owner": "safebunny.queues.journal_owner",
    "safebunny.message_rows": "safebunny.amqp.message_rows",
    "safebunny.outgoing": "safebunny.amqp.outgoing",
    "safebunny.pause_file": "safebunny.storage.pause",
    "safebunny.publisher": "safebunny.amqp.confirming_publisher",
    "safebunny.queue_probe": "safebunny.streams.probe",
    "safebunny.session": "safebunny.spark.session",
    "safebunny.shim": "safebunny.spark.shim",
    "safebunny.sink_options": "safebunny.options.sink",
    "safebunny.source": "safebunny.queues",
    "safebunny.source_options": "safebunny.options.source",
    "safebunny.spark_conf": "safebunny.spark.conf",
    "safebunny.spark_errors": "safebunny.spark.exceptions",
    "safebunny.spark_logs": "safebunny.spark.log_levels",
    "safebunny.spark_version": "safebunny.spark.version",
    "safebunny.stream_client": "safebunny.streams.client",
    "safebunny.stream_offsets": "safebunny.streams.offsets",
    "safebunny.volumes": "safebunny.storage.volumes",
})


def _moved_to(name: str) -> str | None:
    """Where module ``name`` is now, when it (or a package it is in) is an old path of :data:`MOVED`."""
    for old, new in MOVED.items():
        if name == old or name.startswith(f"{old}."):
            return new + name[len(old):]
    return None


class _Moved(importlib.abc.MetaPathFinder):
    """Last on ``sys.meta_path``: asked only for a module no other finder has, it answers an old path of
    :data:`MOVED` with :class:`~safebunny.errors.SafeBunnyMovedError` instead of Python's bare "No module"."""

    def find_spec(self, name: str, path: Sequence[str] | None = None, target: Any = None) -> None:
        moved = _moved_to(name) if name.startswith(("safebunny.", "pyspark_safebunny.")) else None
        if moved is not None:
            from safebunny.errors import SafeBunnyMovedError

            raise SafeBunnyMovedError(f"{name} moved to {moved}: import {moved} instead (CHANGELOG.md lists every "
                                      "public name that moved).", name=name)


def refuse_moved() -> None:
    """Install the finder of :data:`MOVED`'s old paths (once)."""
    if not any(isinstance(finder, _Moved) for finder in sys.meta_path):
        sys.meta_path.append(_Moved())


def exports(package: str, lazy: Mapping[str, str], gone: Mapping[str, str] | None = None,
            ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``, resolving each name of ``lazy`` from its module; a name of
    ``gone`` (an earlier release's) raises :class:`~safebunny.errors.SafeBunnyMovedError` saying what to write."""

    def __getattr__(name: str) -> Any:
        module = lazy.get(name)
        if module is None:
            from safebunny.errors import moved_names

            return moved_names(package, gone or {})(name)  # our error for a name that went, else AttributeError
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)  # once: later lookups are plain attribute reads
        return value

    def __dir__() -> list[str]:  # the public names, not the module's imports (``sys``, ``Any``, ...)
        module = sys.modules[package]
        return sorted(set(getattr(module, "__all__", vars(module))) | set(lazy))

    return __getattr__, __dir__
