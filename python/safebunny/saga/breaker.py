"""The circuit breaker: pausing one step's consumption without stopping its query.

A pause is a small control file ``<root>/control/<node>.<type>.pause`` holding the time it ends; the
step's reader (a long-lived process of its own) checks it in every ``latestOffset`` (source option
``pauseFile``). While paused the reader takes nothing and returns the messages it had prefetched to
the queue, so nothing stays unacked for long; the pause ends by itself.
"""

from __future__ import annotations

import os
import time

__all__ = ["pause_path", "pause", "resume", "paused_until"]


def pause_path(root: str, node: str, message_type: str) -> str:
    return os.path.join(root, "control", f"{node}.{message_type}.pause")


def pause(root: str, node: str, message_type: str, seconds: float) -> float:
    """Pause the step for ``seconds``; returns the epoch time the pause ends."""
    until = time.time() + float(seconds)
    path = pause_path(root, node, message_type)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(repr(until))
    os.replace(tmp, path)
    return until


def resume(root: str, node: str, message_type: str) -> None:
    try:
        os.remove(pause_path(root, node, message_type))
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
