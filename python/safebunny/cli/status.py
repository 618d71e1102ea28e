"""``safebunny status <saga> [--shards] [--watch [SECONDS]]``: one line per step, or per shard."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from safebunny.cli import access
from safebunny.cli.render import print_rows

if TYPE_CHECKING:
    from safebunny.saga.saga import Saga

__all__: list[str] = []


def columns() -> list[str]:
    """A step's line: depths, its counters (:data:`~safebunny.saga.run.reports.COUNTERS`), rate, last batch, breaker."""
    from safebunny.saga.run.reports import COUNTERS  # loaded with the saga by now; ``safebunny --help`` stays light

    return ["step", "state", "backlog", "ready", "unacked", "retrying", "poisoned", *COUNTERS, "rate", "lastBatch",
            "breaker"]


SHARD_COLUMNS = ["step", "shard", "queue", "backlog", "held", "holder", "leaseAgeSeconds", "lastDriver", "lastBatch",
                 "idleSeconds"]


def _rows(args: argparse.Namespace, saga: Saga) -> list[dict[str, Any]]:
    return access.shards(saga) if args.shards else access.status(saga)


def _print(args: argparse.Namespace, rows: list[dict[str, Any]], saga: Saga, empty: str = "(none)") -> None:
    if args.shards:
        print_rows(args, rows, SHARD_COLUMNS, empty="(no step is sharded)")
        return
    print_rows(args, rows, columns(), empty=empty)
    notes = sorted({r["note"] for r in rows if r.get("note")})
    if args.json:
        return
    print("\n".join(state_lines(rows)))
    if notes:
        print("\n".join(notes))
    print(unrouted_line(*access.unrouted(saga)))
    for problem in access.problems(saga, rows):
        print(f"WARNING {problem}")


def state_lines(rows: list[dict[str, Any]]) -> list[str]:
    """Each step's state in words (``saga.status()``'s ``state`` and ``state_detail``), the alarming ones first."""
    from safebunny.saga.look.status import STEP_STATES

    ordered = sorted(rows, key=lambda r: STEP_STATES.index(r["state"]) if r.get("state") in STEP_STATES else 0)
    return [f"{r['step']}: {r.get('state')}: {r.get('state_detail')}" for r in ordered]


def unrouted_line(queue: str, depth: int | None) -> str:
    """The status line of the saga's unrouted stream: its depth, and a warning when it holds messages."""
    if depth is None:
        return f"unrouted: {queue} is not declared (safebunny topology declare)"
    if not depth:
        return f"unrouted: 0 messages in {queue}"
    return (f"WARNING unrouted: {depth} message(s) in {queue}: types sent to the saga's exchange that no step "
            "consumes (kept for the saga's unrouted_max_age, default 7 days). Add a step that consumes them, or "
            f"stop sending them; read them with spark.read.format('safebunny').option('queue', '{queue}')")


def positive(convert: Callable[[str], Any], what: str, bound: str) -> Callable[[str], Any]:
    """argparse type: ``convert(text)``, which must be > 0; ``what`` and ``bound`` word the two errors."""
    def parse(text: str) -> Any:
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"expected {bound}, got {text!r}")
        return value

    return parse


#: argparse type: a number of seconds > 0
positive_seconds = positive(float, "seconds as a number", "seconds > 0")


def _status(args: argparse.Namespace, saga: Saga) -> int:
    if args.watch is None:
        _print(args, _rows(args, saga), saga, empty="(the saga has no steps)")
        return 0
    try:
        while True:
            rows = _rows(args, saga)
            if not args.json and sys.stdout.isatty():
                sys.stdout.write("\x1b[H\x1b[2J")
            print(f"{saga.name}  {time.strftime('%H:%M:%S')}  (every {args.watch:g} s, Ctrl-C stops)")
            _print(args, rows, saga)
            sys.stdout.flush()
            time.sleep(args.watch)
    except KeyboardInterrupt:
        return 0


def add_parsers(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """Add ``status``."""
    status = sub.add_parser("status", parents=[common],
                            help="per step: depths, unacked, counters (from any process), rate, last batch, breaker")
    status.add_argument("--shards", action="store_true",
                        help="one line per shard of each sharded step: backlog, held, driver of its last batch")
    status.add_argument("--watch", nargs="?", const=2.0, default=None, type=positive_seconds, metavar="SECONDS",
                        help="refresh every SECONDS (default 2) until Ctrl-C")
    status.set_defaults(run=_status)
