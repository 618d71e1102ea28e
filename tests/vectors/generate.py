"""Regenerate ``message_ids.json``: ``python tests/vectors/generate.py``.

Only run this when the id rule changes on purpose (a new tag version); otherwise the
committed file is the contract that the Python and Scala implementations both meet.
"""

from __future__ import annotations

import json
from pathlib import Path

from safebunny.ids import correlation_id_for, message_id

CASES = [
    ("order-1", "billing", "InvoiceRequested", 0),
    ("order-1", "billing", "InvoiceRequested", 1),
    ("order-1", "shipping", "InvoiceRequested", 0),
    ("order-1", "billing", "PaymentCaptured", 0),
    ("3f0c3a4e-5b1d-5c6e-9a7f-2b8e4d1c6a90", "inventory", "StockReserved", 7),
    ("a|b", "c", "d", 0),
    ("a", "b|c", "d", 0),
    ("1:a", "b", "c", 0),
    ("ünïcødé-ключ-键", "nœud", "Typ€", 3),
    ("emoji-\U0001f407", "node", "Type", 0),
    ("x", "y", "z", 2147483647),
    ("x" * 300, "y", "z", 12),
    ("with space", "node.with.dots", "Type_With_Underscore", 42),
]
KEYS = ["order-1", "ORDER-1", "ünïcødé", "k|ey", "1:x", "x" * 300]


def build() -> dict:
    return {
        "rule": "uuid5(NAMESPACE, tag + ('|' + str(len(utf8(f))) + ':' + f for each field))",
        "namespace": "3f0c3a4e-5b1d-5c6e-9a7f-2b8e4d1c6a90",
        "message_tag": "safebunny.msg.v1",
        "correlation_tag": "safebunny.corr.v1",
        "message_ids": [
            {"causation_id": c, "node": n, "message_type": t, "index": i, "expected": message_id(c, n, t, i)}
            for c, n, t, i in CASES
        ],
        "correlation_ids": [{"business_key": k, "expected": correlation_id_for(k)} for k in KEYS],
    }


if __name__ == "__main__":
    path = Path(__file__).with_name("message_ids.json")
    path.write_text(json.dumps(build(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {path}")
