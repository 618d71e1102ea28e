"""A pause file: the source option ``pauseFile`` and what writes it.

The file holds the epoch time a pause ends. The queue source reads it in every ``latestOffset`` and takes
nothing while the time is still ahead; whoever pauses (a saga's circuit breaker, an operator) writes it
whole, so a reader never sees half a number. The pause ends by itself.
"""

from __future__ import annotations

import os
import time

from pyarrow import fs as pafs

from safebunny.atomic import write_atomically

__all__ = ["write_pause", "clear_pause", "paused_until"]


def write_pause(path: str, seconds: float) -> float:
    """Pause whatever reads ``path`` for ``seconds``; returns the epoch time the pause ends."""
    until = time.time() + float(seconds)
    write_atomically(pafs.LocalFileSystem(), os.path.abspath(path), repr(until).encode(), durable=False)
    return until


def clear_pause(path: str) -> None:
    """End the pause at ``path`` now (nothing happens when there is none)."""
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


def paused_until(path: str, now: float | None = None) -> float | None:
    """The end of the pause recorded in ``path`` if it is still running, else ``None``."""
    try:
        with open(path) as f:
            until = float(f.read().strip() or 0)
    except (FileNotFoundError, ValueError):
        return None
    return until if until > (now if now is not None else time.time()) else None
