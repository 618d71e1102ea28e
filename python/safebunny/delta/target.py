"""The interface of one Delta table written and read exactly once, which both backends keep.

Which backend a table gets is :func:`safebunny.delta.backend.delta_target`'s choice, made once (docs/design.md);
the backends import this module and this module imports neither.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import datetime as dt

    import pyarrow as pa

__all__ = ["DeltaTarget", "Guard", "Prefix", "BACKENDS", "is_path"]

#: ``guard(read, version)``: checks a snapshot before a commit (``read(app_id)`` is an app id's version there,
#: ``version`` the table's, None without a table); raises to refuse
Guard = Callable[[Callable[[str], "int | None"], "int | None"], None]
#: a delete's text filter: (text column, prefix, True for the rows that start with it / False for the others)
Prefix = tuple[str, str, bool]
#: ``auto`` picks delta-rs for a path and Spark Delta for a table name.
BACKENDS = ("auto", "delta-rs", "spark")


def is_path(table: str) -> bool:
    """A table given by path (``/...``, ``./...``, ``file:``, ``s3://``, ...) rather than by name."""
    return "/" in table or "\\" in table or table.startswith(".") or "://" in table


class DeltaTarget(ABC):
    """One Delta table. A write is one commit carrying the app transaction ``(app_id, version)``, skipped (False)
    when the table holds ``app_id`` at ``version`` or beyond; ``fences`` (more app transactions for the same
    commit) and ``guard`` (a check of the snapshot the commit is made from) only on a fenceable target."""

    #: ``"delta-rs"`` or ``"spark"``
    backend: str
    #: a commit takes several app transactions and checks its own replay against the table (delta-rs); a Spark
    #: Delta writer takes one per commit and skips its own replay by itself
    fenceable: bool
    #: the table: an absolute path or URI (delta-rs), or a name or path (Spark Delta)
    table: str

    @abstractmethod
    def append(self, data: pa.Table, app_id: str | None = None, version: int = 0, partition_by: Sequence[str] = (),
               fences: Sequence[tuple[str, int]] = (), guard: Guard | None = None) -> bool:
        """Append ``data`` (no ``app_id``: a plain append, nothing checked); True when written."""

    @abstractmethod
    def merge(self, data: pa.Table, on: Sequence[str], app_id: str, version: int,
              fences: Sequence[tuple[str, int]] = (), guard: Guard | None = None) -> bool:
        """Upsert ``data`` on the ``on`` columns, one source row per key (:mod:`~safebunny.delta.merge_rows`)."""

    @abstractmethod
    def versions(self, apps: Mapping[str, int], since: Mapping[str, float] | None = None) -> dict[str, int | None]:
        """For each ``app_id -> version``, the table's version of ``app_id`` (delta-rs: the last written, from one
        snapshot; Spark Delta: ``version`` when its history holds it or a later one, else None). ``since``: app id
        -> the unix time after which its commit can only have come (its claim's); Spark Delta reads "not applied"
        only where the history reaches back that far. A failure to read, or a history cleaned past that time,
        raises: unknown is never "not applied"."""

    def identity(self) -> str:
        """What the table is, whatever its spelling: where a step's app ids, locks and claims key it. A path is
        itself; a name is what the catalog resolves it to (:meth:`SparkDeltaTarget.identity`)."""
        return self.table

    def table_version(self) -> int | None:
        """The table's current version (its last commit), where a fenced batch's plan is pinned; None without a
        table, or on a target that is not fenceable."""
        return None

    @abstractmethod
    def read(self, equal: Mapping[str, Any] | None = None, columns: Sequence[str] | None = None) -> pa.Table | None:
        """The rows whose columns equal ``equal``'s values (a list or tuple: any of its values), all rows when None,
        with ``columns`` only when given; None when there is no table."""

    @abstractmethod
    def schema(self) -> pa.Schema | None:
        """The table's Arrow schema; None when there is none yet, or it is not read from here (a name)."""

    @abstractmethod
    def delete_before(self, node: str, column: str, before: str, starting: Prefix | None = None) -> int | None:
        """Delete ``node``'s rows whose ``column`` (an ISO date) is before ``before``: how many (0 without a table,
        None: not told). ``starting`` ``(text column, prefix, True)``: only rows whose text starts with the prefix
        (``False``: only those that do not)."""

    @abstractmethod
    def compact(self, vacuum: bool = True) -> dict[str, Any]:
        """Compact, vacuum (Delta's default retention), sweep what killed writers left: ``compacted``,
        ``vacuumed``, ``swept`` (all 0 without a table; None: not told)."""

    # -- what a step looks up in an inbox table (docs/exactly-once.md)
    @abstractmethod
    def batch_done(self, app_id: str, node: str, epoch: str, batch_id: int) -> bool:
        """Whether this inbox table holds batch ``(epoch, batch_id)`` of ``node``, appended as ``(app_id, batch_id)``:
        the marker that all the batch's effects are done."""

    @abstractmethod
    def seen(self, node: str, since: dt.date, message_ids: Sequence[str], epoch: str, batch_id: int) -> set[str]:
        """The ids among ``message_ids`` that this inbox table holds as ``done`` for ``node`` since ``since``,
        leaving out the rows that batch ``(epoch, batch_id)`` itself wrote (so its replay is processed again)."""

    @abstractmethod
    def recorded(self, node: str, epoch: str, batch_id: int, done_ids: Sequence[str]) -> None:
        """Batch ``(epoch, batch_id)`` of ``node`` appended its marker here with ``done_ids`` done: a target that keeps
        its look-ups up from the table's new commits (Spark Delta's index) needs not read them back."""

    # -- the history a table that is not fenceable is locked from (a table by name on Spark Delta)
    def history(self) -> Any:
        """The table's commit history, read before a batch lists the claims; a fenceable target has none."""
        raise NotImplementedError(f"{type(self).__name__} is fenceable: its commits carry their fences")

    def lock_in(self, history: Any, lock: str) -> int | None:
        """The version of the app transaction ``lock`` in ``history`` (:meth:`history`); None when it holds none."""
        raise NotImplementedError(f"{type(self).__name__} is fenceable: its commits carry their fences")

    def versions_in(self, history: Any, apps: Mapping[str, int],
                    since: Mapping[str, float] | None = None) -> dict[str, int | None]:
        """:meth:`versions`, read in ``history`` (:meth:`history`) instead of the table."""
        raise NotImplementedError(f"{type(self).__name__} is fenceable: its commits carry their fences")

