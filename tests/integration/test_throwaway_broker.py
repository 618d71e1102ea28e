"""The throwaway broker used by restart tests cleans up after itself, epmd included."""

import os

import pytest

from brokers import ThrowawayBroker, amqp_answers, processes_with_env
from helpers import wait_until


def test_throwaway_broker_starts_answers_and_leaves_nothing_behind():
    broker = ThrowawayBroker(plugins=()).start()
    try:
        assert amqp_answers(broker.uri)
        epmd = broker.epmd_pids()
        assert len(epmd) == 1
    finally:
        broker.destroy()
    assert not amqp_answers(broker.uri, timeout=1)
    wait_until(lambda: not os.path.exists(f"/proc/{epmd[0]}"), timeout=10, what="epmd gone")
    assert not broker.base.exists()


def test_a_start_cut_short_leaves_no_node_behind():
    """A start that fails or is interrupted before the node wrote its pid file still ends the node (``stop``
    alone finds nothing to stop then) and its epmd."""
    broker = ThrowawayBroker(plugins=())
    with pytest.raises(RuntimeError, match="did not open port"):
        broker.start(timeout=0.5)
    marker = f"RABBITMQ_PID_FILE={broker.pid_file}"
    # 60 s: a node killed while it boots can take half a minute to go on a machine loaded by a Spark job beside
    # the tests (20 s timed out once in CI); a node left behind stays and fails this all the same
    wait_until(lambda: not processes_with_env(marker) and not broker.epmd_pids(), timeout=60,
               what="the cut-short node and its epmd gone")
    assert not broker.base.exists()
    assert not amqp_answers(broker.uri, timeout=1)
