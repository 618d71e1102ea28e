"""The ``safebunny`` command line: small tools around the library."""

from __future__ import annotations

import argparse
import sys

from safebunny import __version__
from safebunny.ids import correlation_id_for, message_id

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="safebunny", description=__doc__)
    parser.add_argument("--version", action="version", version=__version__)
    sub = parser.add_subparsers(dest="command", required=True)
    mid = sub.add_parser("message-id", help="print the deterministic id of an outgoing message")
    mid.add_argument("causation_id")
    mid.add_argument("node")
    mid.add_argument("message_type")
    mid.add_argument("index", type=int, nargs="?", default=0)
    corr = sub.add_parser("correlation-id", help="print the correlation id of a business key")
    corr.add_argument("business_key")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "message-id":
        print(message_id(args.causation_id, args.node, args.message_type, args.index))
    elif args.command == "correlation-id":
        print(correlation_id_for(args.business_key))
    return 0


if __name__ == "__main__":
    sys.exit(main())
