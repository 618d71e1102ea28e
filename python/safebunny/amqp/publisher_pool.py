"""Open confirming publishers kept per URI and settings in the process: :func:`acquire` one, :func:`release`
it, and the tasks that a reused Spark Python worker runs share a connection; all are closed at exit."""

from __future__ import annotations

import atexit
import threading
import time
from typing import Any

from safebunny.amqp.confirming_publisher import ConfirmingPublisher, PublishCounts

__all__ = ["acquire", "release", "close_all"]

_POOL: dict[tuple[Any, ...], list[ConfirmingPublisher]] = {}
_LOCK = threading.Lock()


def acquire(uri: str, *, max_in_flight: int = 1000, confirm_timeout: float = 30.0, heartbeat: int = 30,
            connect_timeout: float = 10.0, name: str = "safebunny/publisher") -> ConfirmingPublisher:
    """An open publisher for these settings: a cached one that is still healthy, or a new one.

    A cached publisher idle for longer than ``heartbeat`` seconds is closed and replaced
    (nobody serviced its heartbeats meanwhile). Give it back with :func:`release`.
    """
    key = (uri, max_in_flight, confirm_timeout, heartbeat, connect_timeout, name)
    while True:
        with _LOCK:
            cached = _POOL.get(key)
            publisher = cached.pop() if cached else None
        if publisher is None:
            break
        idle = time.monotonic() - publisher.last_used
        if heartbeat and idle > heartbeat:
            publisher.close()
            continue
        try:
            publisher.service()
        except Exception:  # noqa: BLE001 - a dead cached connection is replaced
            publisher.close()
            continue
        if publisher.is_open:
            publisher.counts = PublishCounts()  # this use's counts only
            return publisher
        publisher.close()
    return ConfirmingPublisher(uri, max_in_flight=max_in_flight, confirm_timeout=confirm_timeout, heartbeat=heartbeat,
                               connect_timeout=connect_timeout, name=name).open()


def release(publisher: ConfirmingPublisher, healthy: bool = True) -> None:
    """Return ``publisher`` to the cache, or close it when ``healthy`` is false or it failed."""
    if not healthy or not publisher.is_open or publisher._pending:
        publisher.close()
        return
    publisher.last_used = time.monotonic()
    key = (publisher.uri, publisher.max_in_flight, publisher.confirm_timeout, publisher.heartbeat,
           publisher.connect_timeout, publisher.name)
    with _LOCK:
        _POOL.setdefault(key, []).append(publisher)


def close_all() -> None:
    """Close every cached publisher (runs at interpreter exit)."""
    with _LOCK:
        publishers = [p for ps in _POOL.values() for p in ps]
        _POOL.clear()
    for publisher in publishers:
        publisher.close()


atexit.register(close_all)
