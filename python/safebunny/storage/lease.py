"""A lease, the record that says who holds something (a journal location, a place among a saga's drivers), renewed
while its holder lives, and the rules by which a reader judges that it lives.

A lease file is one JSON object written whole (:mod:`.writes`): the holder (under a key its user names), the
``host``, ``pid`` and ``pid_start`` (so a reused pid is not taken for it) of the holding process, ``renewed``
(epoch seconds, the writer's clock) and beside them the user's own fields (its payload). So the files written
before this module read back as leases: a driver lease of an older version has ``renewed`` in ISO 8601, a journal
owner record from before renewals has none (:attr:`Lease.renewed` is None; its user says what that means).

A holder lives (:meth:`Lease.live`): in this process, while its :class:`Renewer` runs; in another process on this
host, while that process runs; on another host, while it was renewed within a ``ttl`` (clocks must agree to well
within it; docs/source.md and docs/sagas.md give each user's ``ttl``).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from pyarrow import fs as pafs

from safebunny.storage.records import list_records, read_records
from safebunny.storage.writes import write_atomically, write_if_absent

__all__ = ["Lease", "Renewer", "read_leases", "write_lease", "DAMAGED"]

T = TypeVar("T")
#: (lease path, holder) of the leases in this process whose renewer runs: two leases of one holder name (a
#: journal owner and a saga driver, say) are told apart by their paths
_RENEWING: set[tuple[str, str]] = set()
#: what a damaged or foreign lease file raises when parsed
DAMAGED = (ValueError, KeyError, TypeError)


@dataclass(frozen=True)
class Lease:
    """One lease record; ``payload``: its user's own fields."""

    holder: str
    host: str
    pid: int
    pid_start: str | None
    renewed: float | None  # epoch seconds; None in a journal owner record written before renewals
    payload: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def mine(cls, holder: str, payload: Mapping[str, Any], renewed: float | None = None) -> Lease:
        """A lease held by ``holder`` in this process, renewed now (or at ``renewed``)."""
        pid = os.getpid()
        return cls(holder, socket.gethostname(), pid, _process_start(pid),
                   time.time() if renewed is None else renewed, dict(payload))

    def renew(self, now: float | None = None) -> Lease:
        return replace(self, renewed=time.time() if now is None else now)

    def renewed_within(self, ttl: float, now: float | None = None) -> bool:
        """Whether the lease was renewed within ``ttl`` seconds of ``now`` (epoch seconds, default the time now)."""
        return self.renewed is not None and (time.time() if now is None else now) - self.renewed <= ttl

    def live(self, ttl: float, now: float | None = None, path: str = "") -> bool:
        """Whether its holder lives (see the module docstring); ``path``: where the lease is, as its
        :class:`Renewer` was given it."""
        if self.host != socket.gethostname():
            return self.renewed_within(ttl, now)
        if self.pid == os.getpid():
            return (path, self.holder) in _RENEWING
        return _process_alive(self.pid, self.pid_start)

    def to_json(self, holder_key: str) -> bytes:
        return json.dumps({**self.payload, holder_key: self.holder, "host": self.host, "pid": self.pid,
                           "pid_start": self.pid_start, "renewed": self.renewed}, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes, holder_key: str) -> Lease:
        raw = dict(json.loads(data))
        renewed = raw.pop("renewed", None)
        if isinstance(renewed, str):  # a driver lease of an older version
            renewed = dt.datetime.fromisoformat(renewed).timestamp()
        return cls(str(raw.pop(holder_key)), str(raw.pop("host", "?")), int(raw.pop("pid", -1)),
                   raw.pop("pid_start", None), None if renewed is None else float(renewed), raw)


def write_lease(filesystem: pafs.FileSystem, path: str, lease: Lease, holder_key: str, durable: bool = True,
                if_absent: bool = False) -> bool:
    """Write ``lease`` whole (readers see the old record or the new one); with ``if_absent``, only when no file is
    there (:func:`~safebunny.storage.writes.write_if_absent`). True when written."""
    if if_absent:
        return write_if_absent(filesystem, path, lease.to_json(holder_key))
    write_atomically(filesystem, path, lease.to_json(holder_key), durable=durable)
    return True


def read_leases(filesystem: pafs.FileSystem, folder: str, holder_key: str, view: Callable[[Lease], T]) -> list[T]:
    """``view`` of each lease in the ``.json`` files of ``folder``; a half-written or foreign file (one that
    ``view`` cannot read either: it raises one of :data:`DAMAGED`) is skipped."""
    return read_records(filesystem, list_records(filesystem, folder, ".json"),
                        lambda data: view(Lease.from_json(data, holder_key)), skip=DAMAGED)


class Renewer(threading.Thread):
    """A daemon thread that calls ``renew`` every ``interval`` seconds until :meth:`stop`; while it runs,
    ``holder`` lives in this process (:meth:`Lease.live`). A renewal that raises is passed to ``on_error`` and the
    next one tries again (storage out for a moment). ``path``: where the lease is (what :meth:`Lease.live` is
    asked with), so one holder name may hold several leases."""

    def __init__(self, holder: str, renew: Callable[[], object], interval: float,
                 on_error: Callable[[Exception], None], path: str = "") -> None:
        super().__init__(name=f"safebunny-lease-{holder}", daemon=True)
        self.holder, self.interval, self._renew, self._on_error = holder, interval, renew, on_error
        self.key = (path, holder)
        self._stopped = threading.Event()

    def start(self) -> None:
        _RENEWING.add(self.key)
        super().start()

    def run(self) -> None:
        while not self._stopped.wait(self.interval):
            try:
                self._renew()
            except Exception as exc:  # noqa: BLE001 - handed to on_error; the next renewal may succeed
                self._on_error(exc)

    def stop(self, wait_s: float = 0.0) -> None:
        """Stop renewing (the holder no longer lives here); wait up to ``wait_s`` for a renewal under way."""
        _RENEWING.discard(self.key)
        self._stopped.set()
        if wait_s and self.is_alive() and threading.current_thread() is not self:
            self.join(wait_s)


def _process_start(pid: int) -> str | None:
    """The start time of process ``pid`` (clock ticks since boot) from /proc; None where unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rfind(b")") + 2:].split()
    return fields[19].decode() if len(fields) > 19 else None


def _process_alive(pid: int, start: str | None) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # it exists, owned by another user
    now = _process_start(pid)
    return start is None or now is None or now == start
