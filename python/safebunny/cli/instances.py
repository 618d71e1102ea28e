"""``safebunny instances <saga> [--state STATE] [--limit N | --all]``: one line per saga instance, the newest
:data:`DEFAULT_LIMIT` unless asked for more."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from safebunny.cli import access
from safebunny.cli.render import print_rows
from safebunny.cli.status import positive

if TYPE_CHECKING:
    from safebunny.saga.saga import Saga

__all__ = ["DEFAULT_LIMIT", "STATES"]

COLUMNS = ["businessKey", "correlationId", "state", "step", "stepsDone", "started", "lastUpdate", "reason"]
#: the states an instance can be in (safebunny.saga.look.instance_state.STATES, without importing the saga here)
STATES = ("running", "retrying", "parked", "discarded", "compensated", "completed")
#: instances shown without --limit or --all (the newest)
DEFAULT_LIMIT = 50


def _instances(args: argparse.Namespace, saga: Saga) -> int:
    rows = access.instances(saga, args.state)
    shown = rows if args.all else rows[:args.limit or DEFAULT_LIMIT]
    print_rows(args, shown, COLUMNS, empty=f"no {args.state or ''} instances".replace("  ", " "))
    if more := len(rows) - len(shown):
        print(f"... and {more} older instance(s): --limit N shows more, --all shows every one, "
              "--state STATE keeps one state", file=sys.stderr)
    return 0


def add_parsers(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """Add ``instances``."""
    cmd = sub.add_parser("instances", parents=[common],
                         help="saga instances: business key, state, current or last step (newest first)")
    cmd.add_argument("--state", choices=STATES, help="only instances in this state")
    shown = cmd.add_mutually_exclusive_group()
    shown.add_argument("--limit", type=positive(int, "a whole number", "a number >= 1"), metavar="N",
                       help=f"at most N instances, the newest (default {DEFAULT_LIMIT})")
    shown.add_argument("--all", action="store_true", help="every instance")
    cmd.set_defaults(run=_instances)
