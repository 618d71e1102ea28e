"""Sagas as chained streaming queries: saga definition, retry tiers, breaker, runner, status and trace.

The modules, from :mod:`.saga`'s :class:`Saga` facade down: docs/design.md ("Layout" and "Module map").
"""

from typing import TYPE_CHECKING

from safebunny import _lazy

_LAZY = {"Retry": "safebunny.saga.retry", "Saga": "safebunny.saga.saga", "SagaSettings": "safebunny.saga.config",
         "SagaMetrics": "safebunny.saga.metrics",
         "StepStatus": "safebunny.saga.status",
         "TraceEntry": "safebunny.saga.trace", "SagaView": "safebunny.saga.view"}
__getattr__, __dir__ = _lazy.exports(__name__, _LAZY)  # on first use: a submodule alone stays light

if TYPE_CHECKING:
    from safebunny.saga.config import SagaSettings
    from safebunny.saga.metrics import SagaMetrics
    from safebunny.saga.retry import Retry
    from safebunny.saga.saga import Saga
    from safebunny.saga.status import StepStatus
    from safebunny.saga.trace import TraceEntry
    from safebunny.saga.view import SagaView

__all__ = ["Saga", "SagaSettings", "Retry", "SagaMetrics", "StepStatus", "TraceEntry", "SagaView"]
