"""``safebunny message-id`` and ``safebunny correlation-id``: the deterministic ids, offline."""

from __future__ import annotations

import argparse

from safebunny.ids import correlation_id_for, message_id

__all__: list[str] = []


def _message_id(args: argparse.Namespace) -> int:
    print(message_id(args.causation_id, args.node, args.message_type, args.index))
    return 0


def _correlation_id(args: argparse.Namespace) -> int:
    print(correlation_id_for(args.business_key))
    return 0


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """Add the two id commands to ``sub``."""
    mid = sub.add_parser("message-id", help="print the deterministic id of an outgoing message")
    mid.add_argument("causation_id", help="the id of the message that causes it")
    mid.add_argument("node", help="the node that receives it")
    mid.add_argument("message_type", help="its type")
    mid.add_argument("index", type=int, nargs="?", default=0, help="its index among the same cause's outputs")
    mid.set_defaults(run=_message_id, needs_saga=False)
    corr = sub.add_parser("correlation-id", help="print the correlation id of a business key")
    corr.add_argument("business_key")
    corr.set_defaults(run=_correlation_id, needs_saga=False)
