"""A small saga the CLI tests load by file path (``safebunny status tests/e2e/cli_saga.py``).

Two steps: ``stock`` reserves (fails for ``order-bad`` until the file ``$CLI_SAGA_FIX`` exists, the
"fix"), ``shipping`` ships. Configured from the environment: ``SAFEBUNNY_URI``, ``CLI_SAGA_NAME``,
``CLI_SAGA_ROOT``, ``CLI_SAGA_FIX``.
"""

from __future__ import annotations

import os
from pathlib import Path

import safebunny

ROOT = Path(os.environ["CLI_SAGA_ROOT"])
FIX = Path(os.environ["CLI_SAGA_FIX"])

saga = safebunny.Saga(os.environ["CLI_SAGA_NAME"], uri=os.environ["SAFEBUNNY_URI"], root=str(ROOT / "saga"),
    settings=safebunny.SagaSettings(retry=safebunny.Retry(delays=("1s",))))


@saga.step("stock", consumes="OrderPlaced", from_node="orders", schema="orderId string, qty int",
           produces=["StockReserved"], rows=True)
def reserve(order, ctx):  # type: ignore[no-untyped-def]
    if order["orderId"] == "order-bad" and not FIX.exists():
        raise ValueError("sku not in the catalogue")
    return safebunny.Outcome(emits=[safebunny.emit({"orderId": order["orderId"]}, type="StockReserved")])


@saga.step("shipping", consumes="StockReserved", from_node="stock", schema="orderId string")
def ship(reserved, ctx):  # type: ignore[no-untyped-def]
    return safebunny.Outcome(effects=[safebunny.append(reserved.select("messageId", "orderId"),
                                                       str(ROOT / "shipments"))])
