"""``safebunny trace <saga> <correlation id or business key>``: one saga instance through the steps."""

from __future__ import annotations

import argparse
import uuid
from typing import TYPE_CHECKING

from safebunny.cli import access
from safebunny.cli.exits import NOT_FOUND
from safebunny.cli.render import print_rows
from safebunny.ids import correlation_id_for

if TYPE_CHECKING:
    from safebunny.saga.saga import Saga

__all__ = ["candidates"]

COLUMNS = ["time", "step", "messageId", "causationId", "attempt", "outcome"]


def candidates(key: str) -> list[str]:
    """Correlation ids to try for ``key``: itself when it is a UUID, then the id derived from it as a
    business key (``safebunny correlation-id``), so both an id and an order number work."""
    out = []
    try:
        out.append(str(uuid.UUID(key)))
    except ValueError:
        pass
    derived = correlation_id_for(key)
    if derived not in out:
        out.append(derived)
    return out


def _trace(args: argparse.Namespace, saga: Saga) -> int:
    for correlation in candidates(args.key):
        rows = access.trace(saga, correlation)
        if rows:
            if not args.json:
                print(f"correlation id {correlation}: {len(rows)} messages")
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
