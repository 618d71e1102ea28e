"""Exactly-once steps (the Delta inbox, idempotent Delta effects, step outcomes).

The sub-packages by concern (protocol, collect, handlers, claims, emits, inbox) and the handler's
:mod:`.outcome` (what it returns and is told): docs/design.md ("Layout").
"""

from typing import TYPE_CHECKING

from safebunny import _lazy

_LAZY = {
    "DEFAULT_WINDOW": "safebunny.exactly_once.inbox.table", "Inbox": "safebunny.exactly_once.inbox.table",
    "InboxRow": "safebunny.exactly_once.inbox.table",
    "Effect": "safebunny.exactly_once.outcome", "Emit": "safebunny.exactly_once.outcome",
    "FailedRow": "safebunny.exactly_once.outcome", "Outcome": "safebunny.exactly_once.outcome",
    "append": "safebunny.exactly_once.outcome", "emit": "safebunny.exactly_once.outcome",
    "merge": "safebunny.exactly_once.outcome", "StepContext": "safebunny.exactly_once.outcome",
    "BatchReport": "safebunny.exactly_once.protocol.report", "Step": "safebunny.exactly_once.protocol.step",
    "StepSettings": "safebunny.exactly_once.protocol.settings",
    "Prepared": "safebunny.exactly_once.collect.batch",
}
__getattr__, __dir__ = _lazy.exports(__name__, _LAZY)  # on first use: the inbox loads pandas and pyarrow.dataset

if TYPE_CHECKING:
    from safebunny.exactly_once.collect.batch import Prepared
    from safebunny.exactly_once.inbox.table import DEFAULT_WINDOW, Inbox, InboxRow
    from safebunny.exactly_once.outcome import Effect, Emit, FailedRow, Outcome, StepContext, append, emit, merge
    from safebunny.exactly_once.protocol.report import BatchReport
    from safebunny.exactly_once.protocol.settings import StepSettings
    from safebunny.exactly_once.protocol.step import Step

__all__ = ["Step", "StepSettings", "StepContext", "BatchReport", "Outcome", "Effect", "Emit", "FailedRow", "append",
           "merge", "emit", "Inbox", "InboxRow", "DEFAULT_WINDOW", "Prepared"]
