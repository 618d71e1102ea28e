"""A step republishes its emits (the same rows, so the same ids) while the broker fails them, up to
``publish_retry_seconds``; a refused password fails at once (the retry loop alone, publishing stubbed)."""

import pyarrow as pa
import pytest

import safebunny.exactly_once.step as step_module
from safebunny.errors import BrokerAuthenticationError, SafeBunnyBrokerError, SafeBunnyPublishError
from safebunny.exactly_once.step import Step

ROWS = pa.table({"value": [b"x"], "messageId": ["id-1"], "routingKey": ["q"]})


def _step(tmp_path, seconds):
    return Step("billing", str(tmp_path / "inbox"), "amqp://guest:guest@127.0.0.1:5672/%2F",
                publish_retry_seconds=seconds)


def _stub(monkeypatch, failures):
    calls, naps = [], []

    def publish(rows, options, scope):
        calls.append((rows, scope))
        if len(calls) <= len(failures):
            raise failures[len(calls) - 1]

    monkeypatch.setattr(step_module, "publish_table", publish)
    monkeypatch.setattr(step_module.time, "sleep", naps.append)
    return calls, naps


def test_a_failing_publish_is_repeated_with_the_same_rows(tmp_path, monkeypatch):
    calls, naps = _stub(monkeypatch, [SafeBunnyBrokerError("down"), SafeBunnyPublishError("nack")])
    _step(tmp_path, 60)._publish(ROWS, "step:billing/E/3")
    assert len(calls) == 3 and all(rows is ROWS and scope == "step:billing/E/3" for rows, scope in calls)
    assert naps == [0.5, 1.0]


def test_the_batch_fails_once_the_retry_time_is_spent(tmp_path, monkeypatch):
    calls, _ = _stub(monkeypatch, [SafeBunnyBrokerError("down")] * 10)
    with pytest.raises(SafeBunnyBrokerError, match="down"):
        _step(tmp_path, 0)._publish(ROWS, "s")
    assert len(calls) == 1


def test_a_refused_password_is_not_retried(tmp_path, monkeypatch):
    calls, _ = _stub(monkeypatch, [BrokerAuthenticationError("refused")])
    with pytest.raises(BrokerAuthenticationError):
        _step(tmp_path, 60)._publish(ROWS, "s")
    assert len(calls) == 1
