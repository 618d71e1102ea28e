"""A saga driver for the parking crash test: ``python saga_parking_driver.py URI NAME WORKDIR CHECKPOINTS [start]``.

Three steps: stock reserves each order with a row handler that calls a "service" (down while the file
``WORKDIR/service-down`` exists: every fifth order then raises ``ServiceDown``, which ``Retry(poison_on=...)``
parks at once, and ``fails_as="StockFailed"`` sends a compensation message); shipping ships what stock reserved;
release consumes ``StockFailed``. Each step appends to a Delta table under WORKDIR. ``start`` publishes 40 orders
first; then ``saga.drain``. Spark's checkpoints go to ``WORKDIR/CHECKPOINTS`` (a new name is a new epoch). The test
sets ``SAFEBUNNY_CRASH_AT`` to kill the driver on the failure-routing path.
"""

import os
import sys

from driver_session import driver_session  # tests/e2e, the script's own folder
from shard_driver import add_shipping

import safebunny

ORDERS = 40


class ServiceDown(RuntimeError):
    """The stock service did not answer."""


def define(uri: str, name: str, workdir: str, checkpoints: str) -> safebunny.Saga:
    saga = safebunny.Saga(name, uri=uri, root=os.path.join(workdir, "saga"), settings=safebunny.SagaSettings(
        batch_size=40, retry=safebunny.Retry(delays=("1s",), poison_on=("ServiceDown",)),
        checkpoints=os.path.join(workdir, checkpoints)))

    @saga.step("stock", consumes="OrderPlaced", from_node="orders", schema="orderId string", rows=True,
               produces=["StockReserved"], fails_as="StockFailed")
    def reserve(order, ctx):
        if int(order["orderId"][1:]) % 5 == 0 and os.path.exists(os.path.join(workdir, "service-down")):
            raise ServiceDown(f"the stock service is down (order {order['orderId']})")
        return safebunny.Outcome(effects=[safebunny.append({"orderId": order["orderId"]},
                                                           os.path.join(workdir, "reservations"))],
                                 emits=[safebunny.emit({"orderId": order["orderId"]}, type="StockReserved")])

    add_shipping(saga, workdir)

    @saga.step("stock", consumes="StockFailed", from_node="stock", schema="orderId string",
               compensates="OrderPlaced")
    def release(failed, ctx):
        return safebunny.Outcome(effects=[safebunny.append(failed.select("messageId", "orderId"),
                                                           os.path.join(workdir, "releases"))])

    return saga


if __name__ == "__main__":
    uri, name, workdir, checkpoints = sys.argv[1:5]
    spark = driver_session("safebunny-saga-parking")
    saga = define(uri, name, workdir, checkpoints)
    if sys.argv[5:] == ["start"]:
        orders = spark.createDataFrame([(f"o{i}",) for i in range(ORDERS)], "orderId string")
        saga.start(orders, node="orders", type="OrderPlaced", business_key="orderId")
    # restarts: the test machine is shared and loaded; a query that fails to start its Python worker is restarted
    # from its checkpoint, which the exactness checks of the test cover
    saga.drain(spark, timeout=420, restarts=6)
    print("DRIVER-DONE", flush=True)
    spark.stop()
