"""The circuit breaker: pausing one step's consumption without stopping its query.

A pause is a small control file ``<root>/control/<node>.<type>.pause`` holding the time it ends
(:mod:`safebunny.storage.pause`); the step's reader (a long-lived process of its own) checks it in every
``latestOffset`` (source option ``pauseFile``). While paused the reader takes nothing and returns the
messages it had prefetched to the queue, so nothing stays unacked for long; the pause ends by itself.
"""

from __future__ import annotations

import os

from safebunny.storage.pause import clear_pause, paused_until, write_pause

__all__ = ["pause_path", "pause", "resume", "paused_until"]


def pause_path(root: str, node: str, message_type: str) -> str:
    return os.path.join(root, "control", f"{node}.{message_type}.pause")


def pause(root: str, node: str, message_type: str, seconds: float) -> float:
    """Pause the step for ``seconds``; returns the epoch time the pause ends."""
    return write_pause(pause_path(root, node, message_type), seconds)


def resume(root: str, node: str, message_type: str) -> None:
    clear_pause(pause_path(root, node, message_type))
