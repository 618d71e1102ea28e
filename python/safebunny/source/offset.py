"""The classic/quorum queue source's offset in Spark's offset log, typed.

``seq`` counts the messages this query has taken (never a delivery tag, which is channel-scoped);
``tick`` only moves to make Spark plan an empty batch (so that it commits the one before); ``journal``
is the journal owner's id (:mod:`safebunny.source.journal_owner`), present once the query has written a batch.
The JSON is what checkpoints already hold, key for key: ``{"seq": n, "tick": t}`` plus ``"journal"``
when set; an old offset without ``tick`` reads as tick 0.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from safebunny.source.journal_owner import OFFSET_KEY

__all__ = ["QueueOffset"]


@dataclass(frozen=True)
class QueueOffset:
    """A point in the queue source's stream of taken messages."""

    seq: int
    tick: int = 0
    journal: str | None = None

    @classmethod
    def from_json(cls, offset: Mapping[str, Any]) -> QueueOffset:
        """An offset from Spark's offset log (a dict from JSON)."""
        journal = offset.get(OFFSET_KEY)
        return cls(int(offset["seq"]), int(offset.get("tick", 0)), str(journal) if journal else None)

    def to_json(self) -> dict[str, Any]:
        """The dict Spark writes to its offset log."""
        out: dict[str, Any] = {"seq": self.seq, "tick": self.tick}
        if self.journal is not None:
            out[OFFSET_KEY] = self.journal
        return out
