"""The ids a step has parked, so that a fresh copy of a parked message counts as a duplicate.

A copy that arrives fresh (no ``x-safebunny-attempt`` or ``x-safebunny-redriven`` header) of a parked
message is dropped and counted as a duplicate; ``redrive`` is the way to run it again (docs/sagas.md,
"Starting"). The ids live in ``<root>/poison/<unit label>.parked.json`` (a JSON list written whole), written
after the poison copy was confirmed, so an id found there is in the poison stream. One file per query (a
shard has its own): a copy of an instance goes to the same shard as its first.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from safebunny.saga.retry import ATTEMPT
from safebunny.storage.location import resolve_location
from safebunny.storage.writes import write_atomically

__all__: list[str] = []

#: the header ``redrive`` sets on the copies it sends back
REDRIVEN = "x-safebunny-redriven"


class ParkedIds:
    """The message ids query ``label`` of a saga under ``root`` has parked."""

    def __init__(self, location: str) -> None:
        self.filesystem, self.path = resolve_location(location, "root")
        self._cache: tuple[Any, frozenset[str], pa.Array] | None = None

    def read(self) -> frozenset[str]:
        from pyarrow import fs

        info = self.filesystem.get_file_info(self.path)
        if info.type == fs.FileType.NotFound:
            return frozenset()
        stamp = (info.mtime_ns, info.size)
        if self._cache is None or self._cache[0] != stamp:
            with self.filesystem.open_input_stream(self.path) as f:
                data = f.read()
            ids = frozenset(orjson.loads(data) if data else ())
            self._cache = (stamp, ids, pa.array(sorted(ids), pa.string()))  # the Arrow set, built once per change
        return self._cache[1]

    def fresh_copies(self, table: pa.Table) -> pa.ChunkedArray | None:
        """Which rows of ``table`` (a batch as the source gives it) are fresh copies of parked ids: the saga step's
        ``Step(skip=...)``, so they count as duplicates; None when nothing is parked."""
        if not self.read():
            return None
        assert self._cache is not None  # read() found ids, so it cached them
        copy = pc.is_in(table.column("messageId"), value_set=self._cache[2])
        for header in (ATTEMPT, REDRIVEN):
            copy = pc.and_(copy, pc.is_null(pc.map_lookup(table.column("headers"), header, "first")))
        return pc.fill_null(copy, False)

    def add(self, ids: Iterable[str]) -> None:
        new = {str(i) for i in ids if i is not None}
        known = self.read()
        if new - known:
            write_atomically(self.filesystem, self.path, orjson.dumps(sorted(known | new)))
            self._cache = None
