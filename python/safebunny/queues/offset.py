"""The classic/quorum queue source's offset in Spark's offset log, typed.

``seq`` counts the messages this query has taken (never a delivery tag, which is channel-scoped);
``tick`` only moves to make Spark plan an empty batch (so that it commits the one before); ``journal``
is the journal owner's id (:mod:`safebunny.queues.journal_owner`), present once the query has written a batch.
The JSON is what checkpoints already hold, key for key: ``{"seq": n, "tick": t}`` plus ``"journal"``
when set; an old offset without ``tick`` reads as tick 0. :func:`logged_seq` reads it back from a file of Spark's
offset log, for a step that reads its batch from the journal.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from safebunny.queues.journal_owner import OFFSET_KEY

__all__ = ["QueueOffset", "logged_seq"]


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


def logged_seq(text: str) -> int | None:
    """The queue source's ``seq`` in one file of Spark's offset log (a version line, the batch's metadata, then
    one offset per source), or None for anything else: another source's offset (no ``seq`` and ``tick``, which
    :meth:`QueueOffset.to_json` always writes), several sources."""
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) != 3 or not lines[0].startswith("v"):
        return None
    try:
        offset = json.loads(lines[2])
    except ValueError:
        return None
    seq = offset.get("seq") if isinstance(offset, dict) else None
    return seq if isinstance(seq, int) and not isinstance(seq, bool) and "tick" in offset else None
