"""Sagas as chained streaming queries: saga definition, retry tiers, breaker, runner, status and trace.

The modules, from :mod:`.saga`'s :class:`Saga` facade down: docs/design.md ("Layout" and "Module map").
"""

from typing import TYPE_CHECKING

from safebunny import _lazy

_LAZY = {"Retry": "safebunny.saga.define.retry", "Saga": "safebunny.saga.saga",
         "SagaSettings": "safebunny.saga.define.config",
         "SagaMetrics": "safebunny.saga.look.metrics",
         "StepStatus": "safebunny.saga.look.status",
         "TraceEntry": "safebunny.saga.look.trace", "SagaView": "safebunny.saga.look.view"}
__getattr__, __dir__ = _lazy.exports(__name__, _LAZY)  # on first use: a submodule alone stays light

if TYPE_CHECKING:
    from safebunny.saga.define.config import SagaSettings
    from safebunny.saga.define.retry import Retry
    from safebunny.saga.look.metrics import SagaMetrics
    from safebunny.saga.look.status import StepStatus
    from safebunny.saga.look.trace import TraceEntry
    from safebunny.saga.look.view import SagaView
    from safebunny.saga.saga import Saga

__all__ = ["Saga", "SagaSettings", "Retry", "SagaMetrics", "StepStatus", "TraceEntry", "SagaView"]
