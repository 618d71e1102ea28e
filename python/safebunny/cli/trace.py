"""``safebunny trace <saga> <correlation id or business key>``: one saga instance through the steps."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from safebunny.cli import access
from safebunny.cli.exits import NOT_FOUND
from safebunny.cli.render import print_rows

if TYPE_CHECKING:
    from safebunny.saga.saga import Saga

__all__: list[str] = []

COLUMNS = ["time", "step", "messageId", "causationId", "attempt", "outcome"]


def _trace(args: argparse.Namespace, saga: Saga) -> int:
    from safebunny.saga.look.trace import candidates  # the saga modules load when a command needs them

    rows = access.trace(saga, args.key)  # the key as a correlation id, else its candidates
    if rows:
        if not args.json:
            print(f"correlation id {rows[0]['correlationId']}: {len(rows)} messages")
        print_rows(args, rows, COLUMNS)
        return 0
    tried = " or ".join(candidates(args.key))
    print_rows(args, [], empty=f"no message of {saga.name} has correlation id {tried}: check the key, "
                                "or whether the saga's inboxes are under another root")
    return NOT_FOUND


def add_parsers(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """Add ``trace``."""
    trace = sub.add_parser("trace", parents=[common],
                           help="the path of one saga instance through the steps, read from the inboxes")
    trace.add_argument("key", help="a correlation id, or the business key the saga was started with")
    trace.set_defaults(run=_trace)
