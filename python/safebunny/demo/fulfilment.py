"""The demo saga, defined with the public saga API only.

    orders ──OrderPlaced──▶ stock (reserve) ──StockReserved──▶ payment (charge)
        payment ──PaymentCharged──▶ shipping (ship)
        payment ──PaymentDeclined──▶ stock (release: compensates OrderPlaced)

Delta tables under ``<root>/tables`` (or by name in a schema, ``tables="main.demo"``, with the saga's own tables:
``SagaSettings(tables=...)``): ``reservations`` (one row per reservation, ``qty`` > 0, and one
per release, ``qty`` < 0), ``payments`` (``status`` charged or declined) and ``shipments``. A card
number ending in ``0002`` is declined, as in card test suites.

The CLI can load it: ``safebunny status safebunny.demo.fulfilment`` (broker from ``SAFEBUNNY_URI``,
files from ``SAFEBUNNY_DEMO_DIR``, the saga's name from ``SAFEBUNNY_DEMO_NAME``, its schema of tables from
``SAFEBUNNY_DEMO_TABLES``: ``make demo`` prints them).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import safebunny

__all__: list[str] = []

NAME = "safebunny-demo"
DECLINED_CARD = "4000-0000-0000-0002"
ORDER_SCHEMA = "orderId string, sku string, qty int, amount double, card string"


def tables(root: str | Path, schema: str | None = None) -> dict[str, str]:
    """The demo's Delta tables: name -> path under ``root``, or -> ``<schema>.<name>``."""
    names = ("reservations", "payments", "shipments")
    return {name: f"{schema}.{name}" if schema else str(Path(root) / "tables" / name) for name in names}


def build(uri: str, root: str | Path, name: str = NAME, delays: tuple[str, ...] = ("1s", "2s"),
          schema: str | None = None, checkpoints: str | None = None) -> Any:
    """The fulfilment saga on the broker at ``uri``, with its checkpoints, inboxes and tables under ``root``;
    ``schema``: its tables and the saga's by name there (``root`` then holds plain files only and may be a Unity
    Catalog volume); ``checkpoints``: the Spark checkpoints' folder (``SagaSettings(checkpoints=...)``)."""
    from pyspark.sql import functions as F

    paths = tables(root, schema)
    saga = safebunny.Saga(name, uri=uri, root=str(Path(root) / "saga"), settings=safebunny.SagaSettings(
        retry=safebunny.Retry(delays=delays), tables=schema, checkpoints=checkpoints))

    @saga.step("stock", consumes="OrderPlaced", from_node="orders", schema=ORDER_SCHEMA,
               produces=["StockReserved"])
    def reserve(orders: Any, ctx: Any) -> Any:
        reserved = orders.select("messageId", "orderId", "sku", "qty")
        return safebunny.Outcome(
            effects=[safebunny.append(reserved, paths["reservations"])],
            emits=[safebunny.emit(orders.select("messageId", "orderId", "sku", "qty", "amount", "card"),
                                  type="StockReserved")])

    @saga.step("payment", consumes="StockReserved", from_node="stock", schema=ORDER_SCHEMA,
               produces=["PaymentCharged", "PaymentDeclined"])
    def charge(items: Any, ctx: Any) -> Any:
        decided = items.withColumn("status", F.when(F.col("card") == DECLINED_CARD, "declined")
                                   .otherwise("charged"))
        charged = decided.where("status = 'charged'").select("messageId", "orderId", "sku", "qty")
        declined = decided.where("status = 'declined'").select("messageId", "orderId", "sku", "qty")
        return safebunny.Outcome(
            effects=[safebunny.append(decided.select("messageId", "orderId", "amount", "status"),
                                      paths["payments"])],
            emits=[safebunny.emit(charged, type="PaymentCharged"), safebunny.emit(declined, type="PaymentDeclined")])

    @saga.step("shipping", consumes="PaymentCharged", from_node="payment", schema="orderId string, sku string, qty int")
    def ship(paid: Any, ctx: Any) -> Any:
        return safebunny.Outcome(effects=[safebunny.append(paid.select("messageId", "orderId", "sku", "qty"),
                                                           paths["shipments"])])

    @saga.step("stock", consumes="PaymentDeclined", from_node="payment", schema="orderId string, sku string, qty int",
               compensates="OrderPlaced")
    def release(declined: Any, ctx: Any) -> Any:
        released = declined.select("messageId", "orderId", "sku", (-F.col("qty")).cast("int").alias("qty"))
        return safebunny.Outcome(effects=[safebunny.append(released, paths["reservations"])])

    return saga


saga = build(os.environ.get("SAFEBUNNY_URI", "amqp://guest:guest@127.0.0.1:5672/%2F"),
             Path(os.environ.get("SAFEBUNNY_DEMO_DIR", ".demo")).resolve(),
             name=os.environ.get("SAFEBUNNY_DEMO_NAME", NAME), schema=os.environ.get("SAFEBUNNY_DEMO_TABLES") or None)
