"""Sagas as chained streaming queries: saga definition, retry tiers, breaker, runner, status and trace.

- :mod:`.saga`: :class:`Saga` (define steps, start instances, run, drain, watch);
- :mod:`.definition`: a step's definition and body parsing; :mod:`.retry`: retry tiers and headers;
- :mod:`.failures`: routing failed rows to retry or poison; :mod:`.parked`: reading and redriving poison;
- :mod:`.breaker`: pausing a step; :mod:`.runner`: the queries and their supervisor.
"""

from safebunny.saga.retry import Retry
from safebunny.saga.saga import Saga, StepStatus, TraceEntry

__all__ = ["Saga", "Retry", "StepStatus", "TraceEntry"]
