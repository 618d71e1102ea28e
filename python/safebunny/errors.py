"""The one error hierarchy of safebunny.

Every error says what is wrong, quotes the value received and says what to do.
Messages never contain a password: callers pass URIs through
:func:`safebunny.uri.redact` before they put them in a message.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

__all__ = [
    "moved_keywords",
    "moved_names",
    "SafeBunnyError",
    "SafeBunnyOptionError",
    "SafeBunnyBrokerError",
    "SafeBunnyPublishError",
    "QueueNotFoundError",
    "BrokerUnreachableError",
    "BrokerAuthenticationError",
    "VhostNotFoundError",
    "SafeBunnyDataLossError",
    "SafeBunnyMissingDependencyError",
    "SafeBunnyMovedError",
    "SafeBunnyPlanError",
    "SafeBunnySparkVersionError",
    "SafeBunnyTopologyError",
    "JournalOwnerError",
]


class SafeBunnyError(Exception):
    """Base class of every error raised by safebunny."""


class SafeBunnyOptionError(SafeBunnyError, ValueError):
    """An option or a column is missing, unknown or has an invalid value."""

    def __init__(self, message: str, option: str | None = None) -> None:
        super().__init__(message)
        self.option = option


class SafeBunnyBrokerError(SafeBunnyError):
    """The broker could not be reached, refused us, or closed a channel or connection."""

    def __init__(self, message: str, reply_code: int | None = None) -> None:
        super().__init__(message)
        self.reply_code = reply_code


class JournalOwnerError(SafeBunnyOptionError):
    """``journalLocation`` belongs to another query (:mod:`safebunny.queues.journal_owner`)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, "journalLocation")


class QueueNotFoundError(SafeBunnyBrokerError):
    """The queue (or stream) does not exist in that vhost."""


class BrokerUnreachableError(SafeBunnyBrokerError):
    """Nothing answered at the URI's host and port."""


class BrokerAuthenticationError(SafeBunnyBrokerError):
    """The broker refused the user name or password."""


class VhostNotFoundError(SafeBunnyBrokerError):
    """The vhost does not exist, or the user may not use it."""


class SafeBunnyPublishError(SafeBunnyBrokerError):
    """A publish was nacked, returned as unroutable, or not confirmed in time."""


class SafeBunnyDataLossError(SafeBunnyError):
    """Data that a logged batch needs is gone (a missing journal, an offset removed by retention)."""


class SafeBunnyMissingDependencyError(SafeBunnyError, ImportError):
    """A package a feature needs is not installed; the message says what to ``pip install``."""


class SafeBunnyMovedError(SafeBunnyError, ImportError):
    """A module imported by a path it had before it moved, or a name of an earlier release that moved or went; the
    message names where it is now or what to write instead (CHANGELOG.md)."""


class SafeBunnyPlanError(SafeBunnyError):
    """A step's handler built a plan Spark refused (an unknown column, a type mismatch): it fails the same way
    on every batch, so ``drain`` and ``run`` do not restart the step; fix the handler and start again."""


class SafeBunnySparkVersionError(SafeBunnyError, RuntimeError):
    """The running PySpark is older than safebunny supports, or missing; ``found`` and ``needed`` say which."""

    def __init__(self, message: str, found: str | None = None, needed: str | None = None) -> None:
        super().__init__(message)
        self.found = found
        self.needed = needed


class SafeBunnyTopologyError(SafeBunnyError):
    """A queue or exchange exists with other arguments than the saga declares
    (:mod:`safebunny.saga.define.topology`)."""


_C = TypeVar("_C", bound=type)


def moved_keywords(moved: Mapping[str, str]) -> Callable[[_C], _C]:
    """A class decorator: a keyword of an earlier release that ``moved`` names (old keyword -> its new form) raises
    a :class:`SafeBunnyOptionError` naming the new form, instead of Python's bare ``unexpected keyword argument``."""
    def decorate(cls: _C) -> _C:
        init = cls.__init__

        @functools.wraps(init)
        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            old = sorted(set(kwargs) & set(moved))
            if old:
                raise SafeBunnyOptionError(f"{cls.__name__}({old[0]}=...) is no longer accepted (CHANGELOG.md): "
                                           f"write {moved[old[0]]}.", old[0])
            init(self, *args, **kwargs)

        cls.__init__ = __init__  # type: ignore[misc]
        return cls

    return decorate


def moved_names(module: str, moved: Mapping[str, str]) -> Callable[[str], Any]:
    """A module's ``__getattr__``: a name of an earlier release that ``moved`` names (old name -> what to write now)
    raises :class:`SafeBunnyMovedError` saying so, any other missing name Python's ``AttributeError``."""
    def __getattr__(name: str) -> Any:
        if name in moved:
            raise SafeBunnyMovedError(f"{module}.{name} is gone (CHANGELOG.md): {moved[name]}", name=module)
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return __getattr__
