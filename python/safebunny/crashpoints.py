"""Named crash points for the crash tests.

``SAFEBUNNY_CRASH_AT=<name>[:<n>]`` makes the process group SIGKILL itself the ``n``-th time
(default the first) the code passes :func:`crash_point` ``(name)``. The crash tests run a
driver in its own session and restart it from the same checkpoint without the variable.
``SAFEBUNNY_FAIL_AT=<name>[:<n>]`` raises :class:`CrashPointFailure` there instead, once: the batch fails
and the driver lives on (its supervisor restarts the query, which replays the batch).
Unset, a crash point costs two dictionary lookups.
"""

from __future__ import annotations

import os
import signal

__all__ = ["crash_point", "CrashPointFailure"]

CRASH_ENV = "SAFEBUNNY_CRASH_AT"
FAIL_ENV = "SAFEBUNNY_FAIL_AT"
#: the driver's process group, for crash points that run in Spark's Python workers
DRIVER_GROUP_ENV = "SAFEBUNNY_CRASH_PGID"
_seen: dict[str, int] = {}
_failed: set[str] = set()


class CrashPointFailure(RuntimeError):
    """Raised once at the crash point ``SAFEBUNNY_FAIL_AT`` names (a test's injected batch failure)."""


def crash_point(name: str) -> None:
    """Kill the whole process group here when ``SAFEBUNNY_CRASH_AT`` names this point (or fail the batch
    once, when ``SAFEBUNNY_FAIL_AT`` does)."""
    failing = os.environ.get(FAIL_ENV)
    if failing and name not in _failed and _reached(failing, name, "fail:"):
        _failed.add(name)
        raise CrashPointFailure(f"injected failure at crash point {name!r} ({FAIL_ENV}={failing})")
    spec = os.environ.get(CRASH_ENV)
    if not spec:
        return
    if _reached(spec, name, ""):
        # Spark's Python workers run in a process group of their own (pyspark.daemon calls setpgid): a crash
        # point there kills the driver's group, named by the driver in SAFEBUNNY_CRASH_PGID, then its own
        driver_group = os.environ.get(DRIVER_GROUP_ENV)
        if driver_group and int(driver_group) != os.getpgrp():
            os.killpg(int(driver_group), signal.SIGKILL)
        os.killpg(os.getpgrp(), signal.SIGKILL)


def _reached(spec: str, name: str, scope: str) -> bool:
    """Whether this pass of ``name`` is the ``n``-th that ``spec`` (``<name>[:<n>]``) asks for."""
    wanted, _, nth = spec.partition(":")
    if wanted != name:
        return False
    key = scope + name
    _seen[key] = _seen.get(key, 0) + 1
    return _seen[key] >= int(nth or 1)
