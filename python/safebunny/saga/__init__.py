"""Sagas as chained streaming queries: saga definition, retry tiers, breaker, runner, status and trace.

- :mod:`.saga`: :class:`Saga` (define steps, start instances, run, drain, watch), a facade over the modules below;
- :mod:`.config`: the saga's settings and every path under its root; :mod:`.starting`: ``saga.start``;
- :mod:`.topology`: the saga's exchange, queues, retry tiers and poison streams, declared idempotently;
- :mod:`.definition`: a step's definition and body parsing; :mod:`.retry`: retry tiers and headers;
- :mod:`.failures`: routing failed rows to retry or poison;
- :mod:`.parked`, :mod:`.poison_ledger`: reading, redriving and discarding poison;
- :mod:`.runner`: the queries and their supervisor;
- :mod:`.reports`, :mod:`.recorder`, :mod:`.status`: each batch's report stored once, and status;
- :mod:`.instances`, :mod:`.instance_state`: saga instances as a table; :mod:`.metrics`: Prometheus metrics.
"""

from typing import TYPE_CHECKING

from safebunny import _lazy

_LAZY = {"Retry": "safebunny.saga.retry", "Saga": "safebunny.saga.saga", "SagaMetrics": "safebunny.saga.metrics",
         "StepStatus": "safebunny.saga.status",
         "TraceEntry": "safebunny.saga.trace"}
__getattr__, __dir__ = _lazy.exports(__name__, _LAZY)  # on first use: a submodule alone stays light

if TYPE_CHECKING:
    from safebunny.saga.metrics import SagaMetrics
    from safebunny.saga.retry import Retry
    from safebunny.saga.saga import Saga
    from safebunny.saga.status import StepStatus
    from safebunny.saga.trace import TraceEntry

__all__ = ["Saga", "Retry", "SagaMetrics", "StepStatus", "TraceEntry"]
