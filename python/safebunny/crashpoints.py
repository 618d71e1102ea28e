"""Named crash points for the crash tests.

``SAFEBUNNY_CRASH_AT=<name>[:<n>]`` makes the process group SIGKILL itself the ``n``-th time
(default the first) the code passes :func:`crash_point` ``(name)``. The crash tests run a
driver in its own session and restart it from the same checkpoint without the variable.
``SAFEBUNNY_FAIL_AT=<name>[:<n>]`` raises :class:`CrashPointFailure` there instead, once: the batch fails
and the driver lives on (its supervisor restarts the query, which replays the batch).
``SAFEBUNNY_STALL_AT=<name>[:<n>]`` stalls the process there instead, once, until a test releases it: it writes
the file ``stalled`` in ``SAFEBUNNY_STALL_DIR`` and waits for the file ``release`` there (a GC pause or a slow
store, forced where a test wants another driver to run meanwhile).
Unset, a crash point costs three dictionary lookups.
"""

from __future__ import annotations

import os
import signal
import time

__all__ = ["crash_point", "CrashPointFailure"]

CRASH_ENV = "SAFEBUNNY_CRASH_AT"
FAIL_ENV = "SAFEBUNNY_FAIL_AT"
STALL_ENV = "SAFEBUNNY_STALL_AT"
#: the folder of a stall's ``stalled`` and ``release`` files
STALL_DIR_ENV = "SAFEBUNNY_STALL_DIR"
#: the driver's process group, for crash points that run in Spark's Python workers
DRIVER_GROUP_ENV = "SAFEBUNNY_CRASH_PGID"
_seen: dict[str, int] = {}
_failed: set[str] = set()


class CrashPointFailure(RuntimeError):
    """Raised once at the crash point ``SAFEBUNNY_FAIL_AT`` names (a test's injected batch failure)."""


def crash_point(name: str) -> None:
    """Kill the whole process group here when ``SAFEBUNNY_CRASH_AT`` names this point (or fail the batch
    once, when ``SAFEBUNNY_FAIL_AT`` does; or wait once for a release, when ``SAFEBUNNY_STALL_AT`` does)."""
    failing = os.environ.get(FAIL_ENV)
    if failing and name not in _failed and _reached(failing, name, "fail:"):
        _failed.add(name)
        raise CrashPointFailure(f"injected failure at crash point {name!r} ({FAIL_ENV}={failing})")
    stalling = os.environ.get(STALL_ENV)
    if stalling and "stall:" + name not in _failed and _reached(stalling, name, "stall:"):
        _failed.add("stall:" + name)
        _stall(name)
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


def _stall(name: str) -> None:
    """Write ``stalled`` (naming the point) and wait for ``release`` in the stall folder."""
    folder = os.environ[STALL_DIR_ENV]
    with open(os.path.join(folder, "stalled.tmp"), "w") as out:
        out.write(f"{name} {os.getpid()}\n")
    os.replace(os.path.join(folder, "stalled.tmp"), os.path.join(folder, "stalled"))
    while not os.path.exists(os.path.join(folder, "release")):
        time.sleep(0.05)


def _reached(spec: str, name: str, scope: str) -> bool:
    """Whether this pass of ``name`` is the ``n``-th that ``spec`` (``<name>[:<n>]``) asks for."""
    wanted, _, nth = spec.partition(":")
    if wanted != name:
        return False
    key = scope + name
    _seen[key] = _seen.get(key, 0) + 1
    return _seen[key] >= int(nth or 1)
