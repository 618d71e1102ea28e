"""How often each step's query was started again after it stopped, kept under the saga's root so any process
(``saga.view()``, ``safebunny view``) can show it: ``<root>/status/<unit label>.restarts.json``.

Written by whoever restarts a query (``saga.run``'s supervisor, ``saga.drain``) with the count, when and the
error's first line. A display record, not exactly-once state: two drivers restarting one shard at the same
instant may count one restart (the last write wins).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import orjson

from safebunny.storage.location import resolve_under
from safebunny.storage.records import read_record
from safebunny.storage.writes import write_atomically

__all__ = ["RestartLog"]


class RestartLog:
    """The restart record of query ``label`` (a step, or a shard) of the saga under ``root``."""

    def __init__(self, root: str, label: str) -> None:
        self.filesystem, self.path = resolve_under(root, "root", "status", f"{label}.restarts.json")

    def read(self) -> dict[str, Any]:
        """``{"count": n, "last": ISO time or None, "error": first line or None}``."""
        data = read_record(self.filesystem, self.path)
        record = orjson.loads(data) if data else {}
        return {"count": int(record.get("count", 0)), "last": record.get("last"), "error": record.get("error")}

    def record(self, error: str | None = None) -> int:
        """Count one restart (``error``: why the query stopped); the new count."""
        count = self.read()["count"] + 1
        line = (error or "").strip().splitlines()[0][:300] if error and error.strip() else None
        write_atomically(self.filesystem, self.path, orjson.dumps({
            "count": count, "last": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "error": line}),
            durable=False)
        return count

    def count(self) -> int:
        return int(self.read()["count"])
