"""``safebunny topology declare|show|delete <saga>``: declare the saga's exchange and queues, list them
with their depths (or draw the saga's flow: ``show --format mermaid``), or delete them (with ``--yes``: their
messages go with them)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from safebunny.cli import access, exits
from safebunny.cli.exits import CliError
from safebunny.cli.render import print_rows

if TYPE_CHECKING:
    from safebunny.saga.saga import Saga

__all__: list[str] = []

COLUMNS = ["kind", "name", "step", "routing", "arguments", "ready"]


def _declare(args: argparse.Namespace, saga: Saga) -> int:
    rows = access.declare(saga)
    print_rows(args, rows, COLUMNS[:-1])
    if not args.json:
        print(f"declared {len(rows)} exchanges and queues (idempotent: existing ones with the same arguments are kept)")
    return 0


def _show(args: argparse.Namespace, saga: Saga) -> int:
    if args.format == "mermaid":  # the definition alone: no broker needed
        print(access.mermaid(saga), end="")
        return 0
    print_rows(args, access.topology(saga), COLUMNS)
    return 0


def _delete(args: argparse.Namespace, saga: Saga) -> int:
    rows = access.topology(saga)
    queues = [r for r in rows if r["kind"] == "queue"]
    held = sum(r["ready"] or 0 for r in queues)
    if not args.yes:
        raise CliError(f"topology delete removes the {len(queues)} queues and the exchanges of saga {saga.name!r}, "
                       f"with the {held} message(s) they hold (ready); add --yes to delete them.", exits.USAGE)
    deleted = access.delete(saga)
    print_rows(args, [{"kind": "queue", "name": name} for name in deleted], ["kind", "name"])
    if not args.json:
        print(f"deleted {len(deleted)} queues ({held} message(s) with them) and the exchanges of saga {saga.name!r}")
    return 0


def add_parsers(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """Add ``topology declare``, ``topology show`` and ``topology delete``."""
    top = sub.add_parser("topology",
                         help="declare, show or delete a saga's exchange, queues, retry tiers and poison queues")
    actions = top.add_subparsers(dest="action", required=True, metavar="action")
    declare = actions.add_parser("declare", parents=[common], help="declare everything (idempotent)")
    declare.set_defaults(run=_declare)
    show = actions.add_parser("show", parents=[common], help="list exchanges, queues and bindings with depths")
    show.add_argument("--format", choices=("table", "mermaid"), default="table",
                      help="table (default: queues with depths, from the broker) or mermaid (the saga's flow as a "
                           "Mermaid flowchart for docs and READMEs, from the definition alone)")
    show.set_defaults(run=_show)
    delete = actions.add_parser("delete", parents=[common],
                                help="delete the saga's queues and exchanges, and the messages they hold")
    delete.add_argument("--yes", action="store_true", help="really delete (without it: say what would go)")
    delete.set_defaults(run=_delete)
