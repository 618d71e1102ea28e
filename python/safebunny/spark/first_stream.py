"""The first streaming query of a driver starts alone, until Spark has created its sources.

Spark keeps one Python function per JVM for the data source, whose ``envVars`` map (not thread-safe) a
query's ``PythonStreamingSourceRunner.init`` grows; two first starts at once, or a job of the format
serialised meanwhile, fail with ``Illegal size N of collection`` (docs/operations.md, the race and its
reproductions). :func:`start` makes the process's first query hold a lock until its status leaves
"Initializing sources"; a batch job of the format (``safebunny.publish``) runs in :func:`guarded` under the
same lock; :func:`new_map` makes the next start wait again after ``safebunny.register``. Over Spark
Connect the map is in the server's JVM: starts go straight through.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["start", "guarded", "new_map", "sources_created", "is_serialization_race"]

log = logging.getLogger("safebunny.session")

#: a streaming query's status messages until its sources exist (``StreamExecution.runStream``)
INITIALIZING = frozenset({"Initializing StreamExecution", "Initializing sources"})
#: how long the first start waits for its sources at most (a source asks the broker while it is created)
WAIT_S = 120.0

#: the DAGScheduler's abort message when a collection a task holds changed size while it was serialised
#: (``scala.collection.generic.DefaultSerializationProxy.writeObject``)
_SERIALIZATION_RACE = re.compile(r"Task serialization failed: java\.lang\.IllegalStateException: "
                                 r"Illegal size \d+ of collection, expected \d+")

_lock = threading.Lock()
_done = False


def sources_created(query: Any, timeout_s: float = WAIT_S, poll_s: float = 0.02) -> bool:
    """Wait until ``query`` has created its sources, or has ended; whether it created them (a query that
    failed before, or is still initialising after ``timeout_s``, may not have)."""
    deadline = time.monotonic() + timeout_s
    while True:
        message = query.status["message"]
        if message not in INITIALIZING:
            return query.isActive or query.exception() is None
        if not query.isActive:
            return False
        if time.monotonic() > deadline:
            log.warning("query %s is still %r after %.0f s; starting the next query anyway", query.name,
                        message, timeout_s)
            return False
        time.sleep(poll_s)


def start(spark: Any, writer: Any) -> Any:
    """``writer.start()``; the process's first query (Spark classic) is waited for until it has created its
    sources, with any other start in the meantime waiting behind it."""
    global _done
    if _done or getattr(spark, "_jsparkSession", None) is None:  # done, or Spark Connect
        return writer.start()
    with _lock:
        if _done:
            return writer.start()
        query = writer.start()
        _done = sources_created(query)  # not created (failed early): the next start waits again
        return query


def new_map() -> None:
    """The source was registered again (a new function, a new map): the next start waits again."""
    global _done
    with _lock:
        _done = False


@contextmanager
def guarded(spark: Any) -> Iterator[None]:
    """Run the block (a Spark job on ``format("safebunny")``) outside the first start's initialisation: until a
    query has created its sources in this process, the block holds the lock :func:`start` takes."""
    if _done or getattr(spark, "_jsparkSession", None) is None:
        yield
        return
    with _lock:
        yield


def is_serialization_race(error: BaseException | str) -> bool:
    """Whether ``error`` (a failed query's exception, or its text) is Spark's task serialisation meeting a
    collection that changed size meanwhile: what the shared map above does when :func:`start` is bypassed."""
    return _SERIALIZATION_RACE.search(str(error)) is not None
