"""Deterministic message and correlation ids: a message id is derived from its cause, never from time or randomness.

An outgoing message's id is a name-based UUID (RFC 9562 version 5, SHA-1) computed from
what caused it, so that a retried task or a replayed batch republishes the same id and
the inbox of the next step can drop the copy. The exact encoding, which the Scala shim
implements byte for byte (``NAMESPACE``, the tags and length-prefixed fields of
:func:`message_id` and :func:`correlation_id_for`): docs/sql-shim.md ("The id rule").
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterable

__all__ = [
    "NAMESPACE",
    "message_id",
    "message_ids",
    "uuid5",
    "correlation_id_for",
    "new_correlation_id",
    "saga_start",
    "encode_name",
]

NAMESPACE = uuid.UUID("3f0c3a4e-5b1d-5c6e-9a7f-2b8e4d1c6a90")
_NS_BYTES = NAMESPACE.bytes
_MSG_TAG = "safebunny.msg.v1"
_CORR_TAG = "safebunny.corr.v1"


def encode_name(tag: str, *fields: str) -> str:
    """Encode ``fields`` unambiguously under ``tag`` (docs/sql-shim.md, "The id rule")."""
    parts = [tag]
    for field in fields:
        if not isinstance(field, str):
            raise TypeError(f"id fields must be str, but got {field!r}")
        parts.append(f"{len(field.encode('utf-8'))}:{field}")
    return "|".join(parts)


def _check(name: str, value: object) -> str:
    if not isinstance(value, str) or value == "":
        raise ValueError(f"'{name}' must be a non-empty str, but got {value!r}")
    return value


def message_id(causation_id: str, node: str, message_type: str, index: int = 0) -> str:
    """The id of the ``index``-th message of type ``message_type`` sent to ``node``
    because of the message ``causation_id``.

    >>> message_id("order-1", "billing", "InvoiceRequested")
    '...'  # doctest: +SKIP
    """
    _check("causation_id", causation_id)
    _check("node", node)
    _check("message_type", message_type)
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise ValueError(f"'index' must be an int >= 0, but got {index!r}")
    return uuid5(encode_name(_MSG_TAG, causation_id, node, message_type, str(index)))


def message_ids(outputs: Iterable[tuple[str, int]], node: str, message_type: str) -> list[str]:
    """:func:`message_id` of each ``(causation_id, index)`` for one node and type (a step derives one per
    output: 10,000 in a large batch), hashing the name's shared prefix and node and type fields once. Node and
    type are checked first, as :func:`message_id` checks them, even when ``outputs`` is empty."""
    _check("node", node)
    _check("message_type", message_type)
    prefix = hashlib.sha1(_NS_BYTES + f"{_MSG_TAG}|".encode(), usedforsecurity=False)
    middle = f"|{encode_name('', node, message_type)[1:]}|".encode()
    out = []
    for cause, index in outputs:
        _check("causation_id", cause)
        if isinstance(index, bool) or not isinstance(index, int) or index < 0:
            raise ValueError(f"'index' must be an int >= 0, but got {index!r}")
        encoded, number = cause.encode("utf-8"), str(index).encode("ascii")
        h = prefix.copy()
        h.update(b"%d:%b%b%d:%b" % (len(encoded), encoded, middle, len(number), number))
        out.append(_render(h.digest()))
    return out


def uuid5(name: str) -> str:
    """``str(uuid.uuid5(NAMESPACE, name))``, without the ``UUID`` object (it runs once per message)."""
    return _render(hashlib.sha1(_NS_BYTES + name.encode("utf-8"), usedforsecurity=False).digest())


def _render(digest: bytes) -> str:
    """The canonical form of a version 5 UUID from its SHA-1 digest."""
    h = bytearray(digest[:16])
    h[6] = (h[6] & 0x0F) | 0x50  # version 5
    h[8] = (h[8] & 0x3F) | 0x80  # RFC 9562 variant
    x = h.hex()
    return f"{x[:8]}-{x[8:12]}-{x[12:16]}-{x[16:20]}-{x[20:]}"


def correlation_id_for(business_key: str) -> str:
    """A saga's correlation id derived from a business key (an order number, say), so that
    starting the same saga twice gives the same correlation id."""
    _check("business_key", business_key)
    return uuid5(encode_name(_CORR_TAG, business_key))


def new_correlation_id() -> str:
    """A fresh random correlation id, for sagas with no natural business key.

    Call it once, where the saga starts, and store or pass the result: calling it again on
    a retry starts a different saga.
    """
    return str(uuid.uuid4())


def saga_start(correlation_id: str, node: str, message_type: str) -> tuple[str, str]:
    """The ``(correlation_id, message_id)`` of the first message of a saga.

    The first message is treated as caused by the correlation id itself, so publishing the
    start twice gives the same message id.
    """
    return correlation_id, message_id(correlation_id, node, message_type, 0)
