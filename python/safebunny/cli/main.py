"""The ``safebunny`` command line.

The commands (``safebunny <command> --help`` for each), how ``<saga>``, the broker and the password are
found, and the exit codes (:mod:`safebunny.cli.exits`): docs/operations.md ("Command line") and
:data:`_EPILOG`. ``--json`` prints JSON instead of tables.
"""

from __future__ import annotations

import argparse
import os
import sys

from safebunny import __version__
from safebunny.cli import exits, instances, poison, run, status, topology, trace, view
from safebunny.cli.exits import CliError
from safebunny.errors import SafeBunnyBrokerError, SafeBunnyError, SafeBunnyOptionError
from safebunny.ids import correlation_id_for, message_id
from safebunny.uri import redact

__all__ = ["main", "build_parser"]

_EPILOG = ("<saga> is package.module:attribute or path/to/file.py[:attribute]. Broker: --uri, else SAFEBUNNY_URI, "
           "else the saga's uri; password: SAFEBUNNY_PASSWORD, else a prompt. Exit codes: 0 done, 1 nothing "
           "matched (view --once: saga not declared or no state), 2 usage, 3 saga not loadable, 4 broker, 5 other "
           "error, 6 run --once left messages, 7 run --once parked messages, 130 interrupted.")


def _common() -> argparse.ArgumentParser:
    """What every saga command takes: the saga, then options that may come before or after its arguments."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("saga", help="package.module:attribute or path/to/file.py[:attribute]")
    common.add_argument("--uri", default=argparse.SUPPRESS,
                        help="AMQP URI of the broker (default: $SAFEBUNNY_URI, else the saga's)")
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print JSON, not tables")
    return common


def _message_id(args: argparse.Namespace) -> int:
    print(message_id(args.causation_id, args.node, args.message_type, args.index))
    return 0


def _correlation_id(args: argparse.Namespace) -> int:
    print(correlation_id_for(args.business_key))
    return 0


def _add_id_parsers(sub: argparse._SubParsersAction) -> None:
    """``safebunny message-id`` and ``safebunny correlation-id``: the deterministic ids, offline (no saga)."""
    mid = sub.add_parser("message-id", help="print the deterministic id of an outgoing message")
    mid.add_argument("causation_id", help="the id of the message that causes it")
    mid.add_argument("node", help="the node that receives it")
    mid.add_argument("message_type", help="its type")
    mid.add_argument("index", type=int, nargs="?", default=0, help="its index among the same cause's outputs")
    mid.set_defaults(run=_message_id, needs_saga=False)
    corr = sub.add_parser("correlation-id", help="print the correlation id of a business key")
    corr.add_argument("business_key")
    corr.set_defaults(run=_correlation_id, needs_saga=False)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every command (pure; used by the tests too)."""
    parser = argparse.ArgumentParser(prog="safebunny", description="Operate safebunny sagas on RabbitMQ and Spark.",
                                     epilog=_EPILOG)
    parser.add_argument("--version", action="version", version=__version__)
    parser.add_argument("--uri", help=argparse.SUPPRESS)
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    sub = parser.add_subparsers(dest="command", required=True, metavar="command")
    common = _common()
    for command in (topology, status, poison, trace, instances, run, view):
        command.add_parsers(sub, common)
    _add_id_parsers(sub)
    return parser


def _fail(message: str, code: int) -> int:
    print(f"safebunny: error: {redact(message)}", file=sys.stderr)
    return code


def _run(args: argparse.Namespace) -> int:
    if not getattr(args, "needs_saga", True):
        return int(args.run(args))
    from safebunny.cli.access import open_saga

    saga = open_saga(args.saga, args.uri, os.environ)
    return int(args.run(args, saga))


def main(argv: list[str] | None = None) -> int:
    """Run one command; returns its exit code (the console script exits with it)."""
    args = build_parser().parse_args(argv)
    try:
        return _run(args)
    except KeyboardInterrupt:
        return exits.INTERRUPTED
    except CliError as exc:
        return _fail(str(exc), exc.code)
    except SafeBunnyOptionError as exc:
        return _fail(str(exc), exits.USAGE)
    except SafeBunnyBrokerError as exc:
        return _fail(str(exc), exits.BROKER)
    except SafeBunnyError as exc:
        return _fail(str(exc), exits.ERROR)
