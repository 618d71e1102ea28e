"""Sagas as chained streaming queries: saga definition, retry tiers, breaker, runner, status and trace.

- :mod:`.saga`: :class:`Saga` (define steps, start instances, run, drain, watch);
- :mod:`.definition`: a step's definition and body parsing; :mod:`.retry`: retry tiers and headers;
- :mod:`.failures`: routing failed rows to retry or poison; :mod:`.parked`: reading and redriving poison;
- :mod:`.breaker`: pausing a step; :mod:`.runner`: the queries and their supervisor.
"""

from typing import TYPE_CHECKING

from safebunny import _lazy

_LAZY = {"Retry": "safebunny.saga.retry", "Saga": "safebunny.saga.saga", "StepStatus": "safebunny.saga.saga",
         "TraceEntry": "safebunny.saga.saga"}
__getattr__, __dir__ = _lazy.exports(__name__, _LAZY)  # on first use: safebunny.saga.breaker alone stays light

if TYPE_CHECKING:
    from safebunny.saga.retry import Retry
    from safebunny.saga.saga import Saga, StepStatus, TraceEntry

__all__ = ["Saga", "Retry", "StepStatus", "TraceEntry"]
