"""Making the library's logs visible in every process it runs in, with no setup.

:func:`install` (run when ``safebunny`` is imported) gives the ``safebunny`` logger a stderr handler that
speaks only while the application has configured no handler of its own (checked at each record, so
configuring logging later takes over); ``SAFEBUNNY_LOG_LEVEL`` sets its level (default ``WARNING``). How
the level reaches the reader process and the executors: docs/operations.md ("Where the logs go").
"""

from __future__ import annotations

import logging
import os
import sys

__all__ = ["install", "LEVEL_ENV", "LOG_LEVELS"]

LEVEL_ENV = "SAFEBUNNY_LOG_LEVEL"
#: the levels ``SAFEBUNNY_LOG_LEVEL`` and the source's and sink's ``logLevel`` option take
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
_FORMAT = "%(asctime)s safebunny %(levelname)s %(name)s [pid %(process)d]: %(message)s"


class _UnlessConfigured(logging.StreamHandler):
    """Writes to stderr only while neither the root logger nor ``safebunny`` has another handler."""

    def emit(self, record: logging.LogRecord) -> None:
        if logging.getLogger().handlers or len(logging.getLogger("safebunny").handlers) > 1:
            return
        super().emit(record)


def install() -> None:
    """Give the ``safebunny`` logger its fallback handler (once per process)."""
    logger = logging.getLogger("safebunny")
    if any(isinstance(h, _UnlessConfigured) for h in logger.handlers):
        return
    level = os.environ.get(LEVEL_ENV, "WARNING").upper()
    handler = _UnlessConfigured(sys.stderr)
    handler.setFormatter(logging.Formatter(_FORMAT))
    logger.addHandler(handler)
    if logger.level == logging.NOTSET:
        logger.setLevel(getattr(logging, level, logging.WARNING))
