"""The PySpark versions safebunny runs on, checked where Spark first meets it.

The wheel does not require ``pyspark`` (a cluster brings its own), so :func:`require_supported` checks the
running one when Spark builds the data source and in ``safebunny.register(spark)``: older than :data:`MINIMUM`
(``latestOffset(start, limit)`` and the other Python data source APIs safebunny uses), or missing, fails
with :class:`~safebunny.errors.SafeBunnySparkVersionError`; a version string that cannot be read is let
through with a warning (docs/databricks.md, "The check").
"""

from __future__ import annotations

import logging
import re

from safebunny.errors import SafeBunnySparkVersionError

__all__ = ["MINIMUM", "parse_version", "supported", "check_version", "require_supported"]

log = logging.getLogger("safebunny.spark")

#: the oldest PySpark safebunny runs on (Databricks Runtime 19's line)
MINIMUM = (4, 2)
_LEADING = re.compile(r"^\s*(\d+)\.(\d+)(?:\.(\d+))?")
_checked = False


def parse_version(version: str) -> tuple[int, int, int] | None:
    """``(major, minor, patch)`` of a PySpark version string (``4.2.1``, ``4.2.0.dev0``, ``4.3.0rc1``,
    ``4.2.0+vendor``), or ``None`` when it does not start with ``<major>.<minor>``."""
    match = _LEADING.match(version or "")
    if match is None:
        return None
    return int(match[1]), int(match[2]), int(match[3] or 0)


def supported(version: str) -> bool | None:
    """True when ``version`` is at least :data:`MINIMUM` (a pre-release of 4.2 counts as 4.2: vendors ship
    ``.dev`` builds); False when older; None when it cannot be read."""
    parsed = parse_version(version)
    return None if parsed is None else parsed[:2] >= MINIMUM


def check_version(version: str | None) -> None:
    """Raise :class:`SafeBunnySparkVersionError` when ``version`` (``None``: PySpark is not installed) is too
    old; warn and return when it cannot be read."""
    needed = ".".join(map(str, MINIMUM))
    if version is None:
        raise SafeBunnySparkVersionError(
            f"safebunny needs PySpark {needed} or newer, but no 'pyspark' can be imported here. On a Spark "
            "cluster or a Databricks runtime, run this in Spark's own Python; for a local install: "
            "pip install 'safebunny[spark]'.", found=None, needed=needed)
    verdict = supported(version)
    if verdict is None:
        log.warning("cannot read the PySpark version %r; safebunny needs %s or newer and goes on", version, needed)
    elif not verdict:
        raise SafeBunnySparkVersionError(
            f"safebunny needs PySpark {needed} or newer (Apache Spark {needed}, Databricks Runtime 19 or newer), "
            f"but this Python runs PySpark {version}. Use a newer runtime, or for a local install: "
            f"pip install 'safebunny[spark]' (PySpark >={needed},<4.4).", found=version, needed=needed)


def require_supported() -> None:
    """Check the PySpark this process imports (once per process; see :func:`check_version`)."""
    global _checked
    if _checked:
        return
    try:
        from pyspark import __version__ as version
    except ImportError:
        version = None
    check_version(version)
    _checked = True
