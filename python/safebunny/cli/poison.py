"""``safebunny poison list|show|redrive|discard <saga> [--step NODE[.TYPE]] ...``."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING

from safebunny.cli import access
from safebunny.cli.exits import NOT_FOUND, USAGE, CliError
from safebunny.cli.render import print_record, print_rows

if TYPE_CHECKING:
    from safebunny.saga.define.definition import SagaStep
    from safebunny.saga.saga import Saga

__all__: list[str] = []

COLUMNS = ["step", "messageId", "correlationId", "attempts", "state", "reason", "parkedAt"]


def _list(args: argparse.Namespace, saga: Saga) -> int:
    rows = [row for step in access.select_steps(saga, args.step) for row in access.poison(saga, step, args.all)]
    print_rows(args, rows, COLUMNS, empty="no parked messages" + ("" if args.all else " (--all shows resolved and "
                                                                                          "discarded ones)"))
    return 0


def _show(args: argparse.Namespace, saga: Saga) -> int:
    wanted = set(args.id)
    found = [row for step in access.select_steps(saga, args.step) for row in access.poison(saga, step, True)
             if row.get("messageId") in wanted]
    if not found:
        print(f"no parked message with id {', '.join(sorted(wanted))}: 'safebunny poison list' shows the ids")
        return NOT_FOUND
    for row in found:
        print_record(args, row)
    return 0


def _per_step(args: argparse.Namespace, saga: Saga, act: Callable[[SagaStep], int], column: str, empty: str) -> int:
    """``act`` on each step ``--step`` names; a row with the count of each step it found messages in."""
    rows = [{"step": step.label, column: done} for step in access.select_steps(saga, args.step) if (done := act(step))]
    print_rows(args, rows, ["step", column], empty=empty)
    return 0 if rows else NOT_FOUND


def _redrive(args: argparse.Namespace, saga: Saga) -> int:
    if not args.all and not args.id and not args.error_type:
        raise CliError("say what to redrive: --id ID (repeatable), --error-type TYPE or --all (with --step to limit "
                       "it)", USAGE)
    return _per_step(args, saga, lambda step: access.redrive(saga, step, list(args.id) if args.id else None,
                                                             args.force, args.error_type),
                     "redriven", "nothing to redrive")


def _discard(args: argparse.Namespace, saga: Saga) -> int:
    return _per_step(args, saga, lambda step: access.discard(saga, step, list(args.id), args.reason), "discarded",
                     "no parked message with those ids")


def add_parsers(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """Add ``poison list``, ``poison show``, ``poison redrive`` and ``poison discard``."""
    poison = sub.add_parser("poison", help="list, show, redrive or discard parked (poisoned) messages")
    actions = poison.add_subparsers(dest="action", required=True, metavar="action")
    step = argparse.ArgumentParser(add_help=False)
    step.add_argument("--step", help="only this step: NODE or NODE.TYPE (its queue's name)")
    lst = actions.add_parser("list", parents=[common, step], help="parked messages with reason and attempts")
    lst.add_argument("--all", action="store_true", help="also resolved (redriven, then processed) and discarded ones")
    lst.set_defaults(run=_list)
    show = actions.add_parser("show", parents=[common, step], help="one parked message, headers and body")
    show.add_argument("--id", action="append", required=True, metavar="MESSAGE_ID", help="its message id")
    show.set_defaults(run=_show)
    redrive = actions.add_parser("redrive", parents=[common, step],
                                 help="send parked messages back to their step after a fix (idempotent)")
    which = redrive.add_mutually_exclusive_group()
    which.add_argument("--id", action="append", default=[], metavar="MESSAGE_ID", help="this message (repeatable)")
    which.add_argument("--all", action="store_true", help="every parked message (of --step, if given)")
    which.add_argument("--error-type", metavar="TYPE", help="the parked messages that failed with this error type "
                       "(e.g. MalformedMessage; 'poison list' shows each one's)")
    redrive.add_argument("--force", action="store_true",
                         help="redrive even for a step with fails_as, whose parked messages were compensated")
    redrive.set_defaults(run=_redrive)
    discard = actions.add_parser("discard", parents=[common, step],
                                 help="give up on parked messages on purpose (recorded with who, when and why)")
    discard.add_argument("--id", action="append", required=True, metavar="MESSAGE_ID", help="this message (repeatable)")
    discard.add_argument("--reason", required=True, help="what was decided and why (recorded)")
    discard.set_defaults(run=_discard)
