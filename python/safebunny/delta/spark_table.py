"""What the Spark Delta target's parts (:mod:`.spark_commits`, :mod:`.spark_create`, :mod:`.spark_inbox`) use of
it, as a protocol that :class:`~safebunny.delta.spark_delta.SparkDeltaTarget` keeps, so that none imports it."""

from __future__ import annotations

from typing import Any, Protocol

from safebunny.delta.spark_history import Entry

__all__ = ["SparkTable"]


class SparkTable(Protocol):
    """One table through the Spark session's Delta."""

    #: the table: a name, or a path
    table: str
    #: what the table is to the user, in errors ("The effect table")
    what: str

    def spark(self, write: bool = False) -> Any:
        """The table's SparkSession (``write``: checked to have Delta, where the target asks for it)."""
        ...

    def exists(self) -> bool:
        """Whether the table is there."""
        ...

    def frame(self) -> Any:
        """The table as a DataFrame of the session."""
        ...

    def history_entries(self) -> list[Entry]:
        """The table's history, newest first (empty without a table)."""
        ...
