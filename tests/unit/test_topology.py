"""Saga topology naming, arguments and the broker's 406 parsing, without a broker."""

from types import SimpleNamespace

import pytest

from safebunny import Retry
from safebunny.errors import SafeBunnyOptionError
from safebunny.options.connection import ConnectionSettings
from safebunny.saga.define import topology
from safebunny.saga.define.config import SagaConfig, SagaLayout, SagaSettings
from safebunny.streams.probe import parse_inequivalent


def _saga(quorum=True):
    steps = [SimpleNamespace(node="stock", consumes="OrderPlaced", from_node="orders"),
             SimpleNamespace(node="payment", consumes="StockReserved", from_node="stock")]
    config = SagaConfig("fulfilment", ConnectionSettings("amqp://localhost"),
                        SagaLayout("/tmp/safebunny-unit-topology"),
                        SagaSettings(Retry(delays=("10s", "1m")), quorum=quorum))
    return SimpleNamespace(name="fulfilment", config=config, steps=steps)


def test_names_follow_node_and_type():
    saga = _saga()
    assert topology.exchange_name(saga) == "fulfilment"
    assert topology.routing_key("stock", "StockReserved") == "stock.StockReserved"
    assert topology.queue_name(saga, "payment", "StockReserved") == "fulfilment.payment.StockReserved"
    assert topology.retry_queue_name(saga, "payment", "StockReserved", 1) == "fulfilment.payment.StockReserved.retry.1"
    assert topology.poison_queue_name(saga, "stock", "OrderPlaced") == "fulfilment.stock.OrderPlaced.poison"


@pytest.mark.parametrize("bad", ["", "a.b", "a*", "a#", "a b", "a/b"])
def test_routing_syntax_is_refused_in_names(bad):
    with pytest.raises(SafeBunnyOptionError, match="must be non-empty"):
        topology.routing_key(bad, "T")


def test_plan_declares_consumer_retry_and_poison_queues_with_explicit_arguments():
    topo = topology.plan(_saga())
    by_name = {q.name: q for q in topo.queues}
    consumer = by_name["fulfilment.payment.StockReserved"]
    assert consumer.arguments == {"x-queue-type": "quorum", "x-delivery-limit": 50, "x-dead-letter-exchange": "",
                                  "x-dead-letter-routing-key": "fulfilment.payment.StockReserved.poison"}
    tier = by_name["fulfilment.payment.StockReserved.retry.1"]
    assert tier.arguments == {"x-queue-type": "classic", "x-message-ttl": 60_000, "x-dead-letter-exchange": "",
                              "x-dead-letter-routing-key": "fulfilment.payment.StockReserved"}
    assert by_name["fulfilment.payment.StockReserved.poison"].arguments == {"x-queue-type": "stream",
                                                                             "x-max-age": "30D"}
    assert topology.Binding("fulfilment", "fulfilment.payment.StockReserved", "stock.StockReserved.#") in topo.bindings
    assert "x-delivery-limit" not in {q.name: q for q in topology.plan(_saga(quorum=False)).queues}[
        "fulfilment.stock.OrderPlaced"].arguments


def test_inequivalent_argument_replies_are_parsed():
    text = ("PRECONDITION_FAILED - inequivalent arg 'x-message-ttl' for queue 'q.retry.0' in vhost '/': received the "
            "value '10000' of type 'signedint' but current is the value '5000' of type 'long'")
    assert parse_inequivalent(text) == {"arg": "x-message-ttl", "what": "queue", "name": "q.retry.0",
                                        "ours": "10000", "theirs": "5000", "current": 5000, "known": True}
    none = ("PRECONDITION_FAILED - inequivalent arg 'x-queue-type' for queue 'q' in vhost '/': received the value "
            "'quorum' of type 'longstr' but current is none")
    assert parse_inequivalent(none)["theirs"] == "none"
    assert parse_inequivalent("something else") is None
    quoted = none.replace("queue 'q'", "queue 'it's'")  # a name with a quote (the probe reads any queue's reply)
    assert parse_inequivalent(quoted)["name"] == "it's"


def test_an_existing_poison_stream_keeps_its_own_retention():
    spec = topology.QueueSpec("s.n.T.poison", "poison", {"x-queue-type": "stream", "x-max-age": "30D"}, "n.T")
    reply = ("PRECONDITION_FAILED - inequivalent arg 'x-max-age' for queue 's.n.T.poison' in vhost '/': received the "
             "value '30D' of type 'longstr' but current is none")
    kept = topology._kept_retention(spec, reply)
    assert kept is not None and kept.arguments == {"x-queue-type": "stream"}
    other = reply.replace("current is none", "current is the value '7D' of type 'longstr'")
    assert topology._kept_retention(spec, other).arguments["x-max-age"] == "7D"
    consumer = topology.QueueSpec("s.n.T", "consumer", {"x-queue-type": "quorum"}, "n.T")
    assert topology._kept_retention(consumer, reply.replace("s.n.T.poison", "s.n.T")) is None
    assert topology._kept_retention(spec, reply.replace("x-max-age", "x-queue-type")) is None
    stream = ("PRECONDITION_FAILED - inequivalent arg 'x-max-age' for queue 's.unrouted' in vhost '/': received '7D' "
              "but current is '2D'")  # a stream's reply names the values without "the value"
    unrouted = topology.QueueSpec("s.unrouted", "unrouted", {"x-queue-type": "stream", "x-max-age": "7D"})
    assert topology._kept_retention(unrouted, stream).arguments["x-max-age"] == "2D"
