"""``safebunny topology declare|show <saga>``: declare the saga's exchange and queues, or list them
with their depths."""

from __future__ import annotations

import argparse
from typing import Any

from safebunny.cli import access
from safebunny.cli.output import print_rows

__all__ = ["add_parsers", "COLUMNS"]

COLUMNS = ["kind", "name", "step", "routing", "arguments", "ready"]


def _declare(args: argparse.Namespace, saga: Any) -> int:
    rows = access.declare(saga)
    print_rows(args, rows, COLUMNS[:-1])
    if not args.json:
        print(f"declared {len(rows)} exchanges and queues (idempotent: existing ones with the same arguments are kept)")
    return 0


def _show(args: argparse.Namespace, saga: Any) -> int:
    print_rows(args, access.topology(saga), COLUMNS)
    return 0


def add_parsers(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """Add ``topology declare`` and ``topology show``."""
    top = sub.add_parser("topology", help="declare or show a saga's exchange, queues, retry tiers and poison queues")
    actions = top.add_subparsers(dest="action", required=True, metavar="action")
    declare = actions.add_parser("declare", parents=[common], help="declare everything (idempotent)")
    declare.add_argument("saga", help="package.module:attribute or path/to/file.py[:attribute]")
    declare.set_defaults(run=_declare)
    show = actions.add_parser("show", parents=[common], help="list exchanges, queues and bindings with depths")
    show.add_argument("saga", help="package.module:attribute or path/to/file.py[:attribute]")
    show.set_defaults(run=_show)
