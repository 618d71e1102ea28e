"""The throwaway broker used by restart tests cleans up after itself, epmd included."""

import os

from brokers import ThrowawayBroker, amqp_answers
from conftest import wait_until


def test_throwaway_broker_starts_answers_and_leaves_nothing_behind():
    broker = ThrowawayBroker(plugins=()).start()
    try:
        assert amqp_answers(broker.uri)
        epmd = broker._epmd_pids()
        assert len(epmd) == 1
    finally:
        broker.destroy()
    assert not amqp_answers(broker.uri, timeout=1)
    wait_until(lambda: not os.path.exists(f"/proc/{epmd[0]}"), timeout=10, what="epmd gone")
    assert not broker.base.exists()
