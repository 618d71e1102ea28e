"""What operators did with a step's parked messages: redriven or discarded, by whom, when and why.

A small JSON file ``<root>/poison/<node>.<type>.json`` written whole
(:func:`safebunny.storage.writes.write_atomically`) records per message id the last action taken;
:func:`state_of` combines it with the entry itself and the inbox into ``parked``, ``redriven``, ``resolved``
or ``discarded`` (docs/operations.md, "The poison ledger"). Two operators writing at the same instant may
lose one record (the last write wins); the message itself is never lost.
"""

from __future__ import annotations

import datetime as dt
import getpass
import socket
from collections.abc import Iterable
from typing import Any

import orjson

from safebunny.storage.location import resolve_location
from safebunny.storage.records import read_record
from safebunny.storage.writes import write_atomically

__all__ = ["PoisonLedger", "state_of"]

#: states a default listing leaves out (``all=True`` / ``--all`` shows them)
HIDDEN_STATES = frozenset({"resolved", "discarded"})


def _operator() -> str:
    try:
        user = getpass.getuser()
    except Exception:  # noqa: BLE001 - no user name in some containers
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


class PoisonLedger:
    """A step's ledger of its parked messages at ``location`` (``SagaLayout.poison_ledger``)."""

    def __init__(self, location: str) -> None:
        self.filesystem, self.path = resolve_location(location, "root")

    def read(self) -> dict[str, dict[str, Any]]:
        """Message id -> its last recorded action (``state``, ``at``, ``by``, ``reason``)."""
        data = read_record(self.filesystem, self.path)
        return orjson.loads(data) if data else {}

    def record(self, ids: Iterable[str], state: str, reason: str | None = None, by: str | None = None,
               now: dt.datetime | None = None) -> None:
        """Record ``state`` (``redriven`` or ``discarded``) for ``ids``."""
        if state not in ("redriven", "discarded"):
            raise ValueError(f"a ledger records 'redriven' or 'discarded', not {state!r}")
        entry = {"state": state, "at": (now or dt.datetime.now(dt.timezone.utc)).isoformat(),
                 "by": by or _operator(), "reason": reason}
        ledger = self.read()
        for mid in ids:
            ledger[mid] = entry
        write_atomically(self.filesystem, self.path, orjson.dumps(ledger, option=orjson.OPT_INDENT_2))


def state_of(entry: dict[str, Any] | None, parked_at: str | None, done: bool) -> str:
    """The state of a parked message: its ledger ``entry`` (or None), when its latest copy was parked
    (ISO time, or None when unknown) and whether the step's inbox has it ``done``."""
    if entry is None:
        return "parked"
    if parked_at is not None and parked_at > entry["at"]:
        return "parked"  # parked again after the action (a redrive that failed again)
    if entry["state"] == "discarded":
        return "discarded"
    return "resolved" if done else "redriven"
