"""Named crash points for the crash tests.

``SAFEBUNNY_CRASH_AT=<name>[:<n>]`` makes the process group SIGKILL itself the ``n``-th time
(default the first) the code passes :func:`crash_point` ``(name)``. The crash tests run a
driver in its own session and restart it from the same checkpoint without the variable.
Unset, a crash point costs one dictionary lookup.
"""

from __future__ import annotations

import os
import signal

__all__ = ["crash_point", "CRASH_ENV", "DRIVER_GROUP_ENV"]

CRASH_ENV = "SAFEBUNNY_CRASH_AT"
#: the driver's process group, for crash points that run in Spark's Python workers
DRIVER_GROUP_ENV = "SAFEBUNNY_CRASH_PGID"
_seen: dict[str, int] = {}


def crash_point(name: str) -> None:
    """Kill the whole process group here when ``SAFEBUNNY_CRASH_AT`` names this point."""
    spec = os.environ.get(CRASH_ENV)
    if not spec:
        return
    wanted, _, nth = spec.partition(":")
    if wanted != name:
        return
    _seen[name] = _seen.get(name, 0) + 1
    if _seen[name] >= int(nth or 1):
        # Spark's Python workers run in a process group of their own (pyspark.daemon calls setpgid): a crash
        # point there kills the driver's group, named by the driver in SAFEBUNNY_CRASH_PGID, then its own
        driver_group = os.environ.get(DRIVER_GROUP_ENV)
        if driver_group and int(driver_group) != os.getpgrp():
            os.killpg(int(driver_group), signal.SIGKILL)
        os.killpg(os.getpgrp(), signal.SIGKILL)
