"""Every connection safebunny opens carries a client-provided name (saga, driver, step or shard, role), read back
from the real management API on a throwaway broker with the plugin (the machine's broker runs without it)."""

from __future__ import annotations

import base64
import json
import urllib.request
from types import SimpleNamespace

import safebunny
from brokers import ThrowawayBroker
from helpers import wait_until
from safebunny.amqp.confirming_publisher import close_all
from safebunny.exactly_once import FailedRow
from safebunny.options.source import parse_source_options
from safebunny.queues.queue_source import QueueSource
from safebunny.saga.run.failures import FailureRouter
from safebunny.saga.run.queries import source_options


def _connection_names(broker: ThrowawayBroker) -> set[str]:
    request = urllib.request.Request(f"http://127.0.0.1:{broker.management_port}/api/connections",  # type: ignore[attr-defined]
                                     headers={"Authorization": "Basic " + base64.b64encode(b"guest:guest").decode()})
    with urllib.request.urlopen(request, timeout=5) as response:  # noqa: S310 - the test's own local broker
        return {(c.get("client_properties") or {}).get("connection_name") for c in json.loads(response.read())}


def test_a_shards_consumer_and_failure_publisher_name_their_saga_driver_shard_and_role(
        management_broker: ThrowawayBroker, tmp_path) -> None:  # type: ignore[no-untyped-def]
    saga = safebunny.Saga("names", uri=management_broker.uri, root=str(tmp_path), settings=safebunny.SagaSettings(
        driver="host-a", retry=safebunny.Retry(delays=("1s",))))
    saga.step("stock", consumes="OrderPlaced", from_node="orders", schema="orderId string", shards=2)(
        lambda df, ctx: None)
    saga.declare()
    unit = saga.units()[1]  # shard 1
    # the reader process's source, started from the options the step's query gets
    source = QueueSource(parse_source_options(source_options(saga, unit).spark_options()))
    try:
        source._consumer_()
        # a failed row sent to the retry tier, as the step's on_failed does (the pooled publisher stays open)
        FailureRouter(saga, unit)([FailedRow("m1", "the service did not answer", 1, "c1", "KeyError",
                                             {"value": b"{}", "headers": {}, "correlationId": "c1"})],
                                  SimpleNamespace(batch_id=0))
        consumer = "safebunny/names/host-a/stock.OrderPlaced.shard.1/consumer"
        failures = "safebunny/names/host-a/stock.OrderPlaced.shard.1/failures"
        wait_until(lambda: {consumer, failures} <= _connection_names(management_broker), timeout=30,
                   what=f"the management API to list {consumer} and {failures}")
        assert None not in _connection_names(management_broker), "every connection named"
    finally:
        source.stop()
        close_all()
