"""The source's control files, and what writes them: the pause file of option ``pauseFile`` and the file an
``availableNow`` run awaits before it may end (option ``availableNowAwaitFile``).

A pause file holds the epoch time a pause ends (docs/source.md, ``pauseFile``). Whoever pauses (a saga's circuit
breaker, an operator) writes it whole, so a reader never sees half a number. An await file says only that it is
there (``saga.drain`` writes it when the steps feeding a step have ended). The path is a local path or any
URI pyarrow opens, resolved as a journal's location is (:func:`safebunny.storage.location.resolve_location`),
so a saga whose root is a URI keeps its pause files there.
"""

from __future__ import annotations

import time

from safebunny.storage.location import resolve_location
from safebunny.storage.records import read_record, remove_record
from safebunny.storage.writes import write_atomically

__all__ = ["write_pause", "clear_pause", "paused_until", "write_await_file", "await_file_present", "clear_await_file"]


def write_pause(path: str, seconds: float) -> float:
    """Pause whatever reads ``path`` for ``seconds``; returns the epoch time the pause ends."""
    until = time.time() + float(seconds)
    write_atomically(*resolve_location(path, "pauseFile"), repr(until).encode(), durable=False)
    return until


def clear_pause(path: str) -> None:
    """End the pause at ``path`` now (nothing happens when there is none)."""
    remove_record(*resolve_location(path, "pauseFile"))


def paused_until(path: str, now: float | None = None) -> float | None:
    """The end of the pause recorded in ``path`` if it is still running, else ``None``."""
    data = read_record(*resolve_location(path, "pauseFile"))
    try:
        until = float((data or b"").decode().strip() or 0)
    except (ValueError, UnicodeDecodeError):
        return None
    return until if until > (now if now is not None else time.time()) else None


def write_await_file(path: str) -> None:
    """Let an ``availableNow`` run that awaits ``path`` end once it has read what its queue holds."""
    write_atomically(*resolve_location(path, "availableNowAwaitFile"), b"1", durable=False)


def await_file_present(path: str) -> bool:
    """Whether ``path`` (an ``availableNowAwaitFile``) is there."""
    return read_record(*resolve_location(path, "availableNowAwaitFile")) is not None


def clear_await_file(path: str) -> None:
    """Remove ``path`` (nothing happens when it is not there)."""
    remove_record(*resolve_location(path, "availableNowAwaitFile"))
