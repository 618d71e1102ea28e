"""Exactly-once steps: the Delta inbox, idempotent Delta effects, step outcomes.

- :mod:`.step`: :class:`Step`, the per-batch protocol run inside ``foreachBatch``;
- :mod:`.outcome`: what a handler returns (:class:`Outcome`, :func:`append`, :func:`merge`, :func:`emit`);
- :mod:`.context`: :class:`StepContext`, what a handler is told;
- :mod:`.inbox`: the inbox table and its maintenance, on a :mod:`safebunny.delta` target;
- :mod:`.takeover`, :mod:`.emits`, :mod:`.materialize`, :mod:`.isolate`, :mod:`.outcome_log`: the
  protocol's parts (the Delta tables themselves: :mod:`safebunny.delta`).
"""

from typing import TYPE_CHECKING

from safebunny import _lazy

_LAZY = {
    "StepContext": "safebunny.exactly_once.context",
    "DEFAULT_WINDOW": "safebunny.exactly_once.inbox", "Inbox": "safebunny.exactly_once.inbox",
    "InboxRow": "safebunny.exactly_once.inbox",
    "Effect": "safebunny.exactly_once.outcome", "Emit": "safebunny.exactly_once.outcome",
    "FailedRow": "safebunny.exactly_once.outcome", "Outcome": "safebunny.exactly_once.outcome",
    "append": "safebunny.exactly_once.outcome", "emit": "safebunny.exactly_once.outcome",
    "merge": "safebunny.exactly_once.outcome",
    "BatchReport": "safebunny.exactly_once.step", "Step": "safebunny.exactly_once.step",
    "Prepared": "safebunny.exactly_once.batch",
}
__getattr__, __dir__ = _lazy.exports(__name__, _LAZY)  # on first use: the inbox loads pandas and pyarrow.dataset

if TYPE_CHECKING:
    from safebunny.exactly_once.batch import Prepared
    from safebunny.exactly_once.context import StepContext
    from safebunny.exactly_once.inbox import DEFAULT_WINDOW, Inbox, InboxRow
    from safebunny.exactly_once.outcome import Effect, Emit, FailedRow, Outcome, append, emit, merge
    from safebunny.exactly_once.step import BatchReport, Step

__all__ = ["Step", "StepContext", "BatchReport", "Outcome", "Effect", "Emit", "FailedRow", "append", "merge",
           "emit", "Inbox", "InboxRow", "DEFAULT_WINDOW", "Prepared"]
