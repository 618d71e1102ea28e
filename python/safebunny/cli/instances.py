"""``safebunny instances <saga> [--state STATE] [--limit N]``: one line per saga instance."""

from __future__ import annotations

import argparse
from typing import Any

from safebunny.cli import access
from safebunny.cli.output import print_rows

__all__ = ["add_parsers", "COLUMNS", "STATES"]

COLUMNS = ["businessKey", "correlationId", "state", "step", "stepsDone", "started", "lastUpdate", "reason"]
#: the states an instance can be in (safebunny.saga.instance_state.STATES, without importing the saga here)
STATES = ("running", "retrying", "parked", "compensated", "completed")


def _instances(args: argparse.Namespace, saga: Any) -> int:
    rows = access.instances(saga, args.state)
    if args.limit is not None:
        rows = rows[: args.limit]
    print_rows(args, rows, COLUMNS, empty=f"no {args.state or ''} instances".replace("  ", " "))
    return 0


def _limit(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a number >= 1, got {text!r}")
    return value


def add_parsers(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """Add ``instances``."""
    cmd = sub.add_parser("instances", parents=[common],
                         help="saga instances: business key, state, current or last step (newest first)")
    cmd.add_argument("saga", help="package.module:attribute or path/to/file.py[:attribute]")
    cmd.add_argument("--state", choices=STATES, help="only instances in this state")
    cmd.add_argument("--limit", type=_limit, metavar="N", help="at most N instances (the newest)")
    cmd.set_defaults(run=_instances)
