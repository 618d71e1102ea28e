"""A driver of the parking-fence test: ``python park_fence_driver.py URI NAME WORKDIR DRIVER``.

One saga, every step one shard (so two drivers hand it over): stock reserves each order with a row handler that
calls a "service", down for this driver while the file ``SAFEBUNNY_TEST_DOWN`` names exists (every order then
raises ``ServiceDown``, which ``Retry(poison_on=...)`` parks at once, and ``fails_as="StockFailed"`` sends the
release compensation); shipping ships what stock reserved; release consumes ``StockFailed``. Each step appends to
a Delta table under WORKDIR (``reservations``, ``shipments``, ``releases``). It runs until ``WORKDIR/stop-DRIVER``
appears; with ``SAFEBUNNY_TEST_GO`` (a file) its saga starts only once that file exists (a standby).
"""

import os
import sys
import time

from driver_session import driver_session  # tests/e2e, the script's own folder

import safebunny


class ServiceDown(RuntimeError):
    """The stock service did not answer."""


def define(uri: str, name: str, workdir: str, driver: str | None) -> safebunny.Saga:
    saga = safebunny.Saga(name, uri=uri, root=os.path.join(workdir, "saga"), settings=safebunny.SagaSettings(
        batch_size=40, retry=safebunny.Retry(delays=("1s",), poison_on=("ServiceDown",)), driver=driver))
    down = os.environ.get("SAFEBUNNY_TEST_DOWN")

    @saga.step("stock", consumes="OrderPlaced", from_node="orders", schema="orderId string", rows=True,
               produces=["StockReserved"], fails_as="StockFailed", shards=1)
    def reserve(order, ctx):
        if down and os.path.exists(down):
            raise ServiceDown(f"the stock service is down (order {order['orderId']})")
        return safebunny.Outcome(effects=[safebunny.append({"orderId": order["orderId"]},
                                                           os.path.join(workdir, "reservations"))],
                                 emits=[safebunny.emit({"orderId": order["orderId"]}, type="StockReserved")])

    @saga.step("shipping", consumes="StockReserved", from_node="stock", schema="orderId string", shards=1)
    def ship(reserved, ctx):
        return safebunny.Outcome(effects=[safebunny.append(reserved.select("messageId", "orderId"),
                                                           os.path.join(workdir, "shipments"))])

    @saga.step("stock", consumes="StockFailed", from_node="stock", schema="orderId string",
               compensates="OrderPlaced", shards=1)
    def release(failed, ctx):
        return safebunny.Outcome(effects=[safebunny.append(failed.select("messageId", "orderId"),
                                                           os.path.join(workdir, "releases"))])

    return saga


if __name__ == "__main__":
    uri, name, workdir, driver = sys.argv[1:5]
    spark = driver_session(f"safebunny-park-fence-{driver}")
    go = os.environ.get("SAFEBUNNY_TEST_GO")
    while go and not os.path.exists(go):
        time.sleep(0.2)
    running = define(uri, name, workdir, driver).run(spark, trigger="500 milliseconds", balance=False)
    print("RUNNING", flush=True)
    stop = os.path.join(workdir, f"stop-{driver}")
    while not os.path.exists(stop):
        time.sleep(0.5)
    running.stop()
    print("DRIVER-DONE", flush=True)
    spark.stop()
