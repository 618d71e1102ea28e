"""Retry tiers and the poison decision, as pure functions over headers of our own.

A failed message goes to the next retry tier (a queue whose TTL is ``delays[i]``) with its attempt count in
``x-safebunny-attempt``, then to poison; ``x-death`` is dropped when republishing, its counts being
unreliable across broker versions (docs/sagas.md, "Failures").
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from safebunny.errors import SafeBunnyOptionError
from safebunny.options import duration_ms

__all__ = ["Retry", "Decision", "parse_duration_ms", "decide", "failure_headers", "ATTEMPT", "FIRST_FAILURE", "REASON"]

ATTEMPT = "x-safebunny-attempt"
FIRST_FAILURE = "x-safebunny-first-failure"
STEP = "x-safebunny-step"
ERROR = "x-safebunny-error"
ERROR_TYPE = "x-safebunny-error-type"
REASON = "x-safebunny-reason"
PARKED_AT = "x-safebunny-parked-at"
_DROP = ("x-death", "x-first-death-exchange", "x-first-death-queue", "x-first-death-reason", "x-last-death-exchange",
         "x-last-death-queue", "x-last-death-reason", "x-delivery-count")
#: Errors that retrying cannot mend: a body that does not parse, a message the handler rejects on purpose.
ALWAYS_POISON = ("MalformedMessage",)


def parse_duration_ms(value: str | int | float) -> int:
    """``"10s"``, ``"1m"``, ``"250ms"``, ``"2 hours"``, ``"1d"`` (:func:`~safebunny.options.duration_ms`), or a
    number of seconds, in milliseconds."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        ms = int(value * 1000)
    else:
        parsed = duration_ms(str(value))
        if parsed is None:
            raise SafeBunnyOptionError(
                f"A retry delay must look like '250ms', '10s', '1m', '2h', '1d' or '30 seconds'; got {value!r}.",
                "delays")
        ms = int(parsed)
    if ms <= 0:
        raise SafeBunnyOptionError(f"A retry delay must be positive; got {value!r}.", "delays")
    return ms


@dataclass(frozen=True)
class Retry:
    """The retry ladder of a saga: ``delays`` (one retry queue per delay) and error type names that go
    to poison at once (``poison_on``, matched against the exception's class name)."""

    delays: tuple[str | int | float, ...] = ("10s", "1m", "10m")
    poison_on: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "delays", tuple(self.delays))
        object.__setattr__(self, "poison_on", tuple(self.poison_on))
        self.delays_ms  # noqa: B018 - validates

    @property
    def delays_ms(self) -> tuple[int, ...]:
        return tuple(parse_duration_ms(d) for d in self.delays)


@dataclass(frozen=True)
class Decision:
    """Where a failed message goes: ``("retry", tier)`` or ``("poison", None)``, and its attempt number."""

    target: str
    tier: int | None
    attempt: int


def decide(retry: Retry, headers: Mapping[str, Any] | None, error_type: str | None) -> Decision:
    """The next stop of a message that failed now (``headers``' attempt count: the failures before)."""
    try:
        attempt = int((headers or {}).get(ATTEMPT, 0)) + 1
    except (TypeError, ValueError):  # not a count of ours: a fresh message
        attempt = 1
    if error_type in ALWAYS_POISON or error_type in retry.poison_on:
        return Decision("poison", None, attempt)
    if attempt <= len(retry.delays_ms):
        return Decision("retry", attempt - 1, attempt)
    return Decision("poison", None, attempt)


def failure_headers(headers: Mapping[str, Any] | None, *, step: str, error_type: str | None, reason: str,
                    attempt: int, poisoned: bool, now: dt.datetime | None = None) -> dict[str, Any]:
    """The headers a failed message is republished with (ours updated, ``x-death`` dropped)."""
    out = {k: v for k, v in (headers or {}).items() if k not in _DROP}
    stamp = (now or dt.datetime.now(dt.timezone.utc)).isoformat()
    out.setdefault(FIRST_FAILURE, stamp)
    out[ATTEMPT] = attempt
    out[STEP] = step
    out[ERROR] = reason[:2000]
    out[ERROR_TYPE] = error_type or "Exception"
    if poisoned:
        out[REASON] = reason[:2000]
        out[PARKED_AT] = stamp
    return out
