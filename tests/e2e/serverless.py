"""Databricks serverless's trigger rule in a local Spark Connect client: only ``availableNow`` is allowed.

Serverless refuses processing-time, continuous, real-time (and ``once``) triggers on the server. Open-source
Spark Connect has no setting for that, and a server-side gRPC interceptor would need JVM code on the shared
test session's classpath before its Connect server starts, so the rule is enforced here, in the client, on
the request itself: :func:`refuse_processing_time` makes the Connect ``DataStreamWriter`` refuse to send a
query start whose trigger is not ``availableNow`` (an explicit processing-time trigger, and the default one:
no trigger at all). Every query a safebunny saga starts is checked this way.

``python serverless.py ARGS...`` runs the ``safebunny`` command with the rule in force.
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["refuse_processing_time", "TriggerRefused"]


class TriggerRefused(Exception):
    """A trigger serverless compute refuses."""


def refuse_processing_time() -> None:
    """From now on, in this process, a Connect query whose trigger is not ``availableNow`` fails to start."""
    from pyspark.sql.connect.streaming.readwriter import DataStreamWriter

    start = DataStreamWriter._start_internal
    if getattr(start, "serverless", False):
        return

    def checked(self: Any, *args: Any, **kwargs: Any) -> Any:
        kind = self._write_proto.WhichOneof("trigger")
        if kind != "available_now":
            raise TriggerRefused(f"serverless compute allows only trigger(availableNow=True); this query's trigger "
                                 f"is {kind or 'the default (processing time 0)'}")
        return start(self, *args, **kwargs)

    checked.serverless = True  # type: ignore[attr-defined]
    DataStreamWriter._start_internal = checked  # type: ignore[method-assign]


if __name__ == "__main__":
    refuse_processing_time()
    from safebunny.cli.main import main

    sys.exit(main(sys.argv[1:]))
