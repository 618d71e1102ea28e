"""What a user sees when a query fails on the broker: safebunny's own error, found by ``safebunny.error_of`` in
Spark's exception, at ``load()``, on the last line of Spark's message but its SQLSTATE, with no PySpark follow-on
error (``UnboundLocalError: ... 'reader'``) after it."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

import pytest

import safebunny
from safebunny.errors import BrokerAuthenticationError, QueueNotFoundError


def _wrong_password(uri: str) -> str:
    parts = urlsplit(uri)
    return urlunsplit((parts.scheme, f"{parts.username}:not-the-password@{parts.hostname}:{parts.port}", parts.path,
                       parts.query, ""))


@pytest.mark.parametrize("case", ["missing queue", "wrong password"])
def test_a_failing_query_carries_safebunnys_error(spark, amqp_uri, make_queue, unique_name, tmp_path, case):
    if case == "missing queue":
        uri, queue, expected = amqp_uri, unique_name + "-missing", QueueNotFoundError
    else:
        uri, queue, expected = _wrong_password(amqp_uri), make_queue("classic"), BrokerAuthenticationError
    with pytest.raises(Exception) as info:  # noqa: B017, PT011 - Spark's exception, whatever its class
        # queueType=auto asks the broker at load(): the error comes there, before any query runs
        (spark.readStream.format("safebunny").option("uri", uri).option("queue", queue)
         .option("journalLocation", str(tmp_path / "journal")).load())
    text = str(info.value)
    # the last line a user sees, but for Spark's SQLSTATE, is ours: the cause and what to do
    last = [line for line in text.splitlines() if line.strip() and not line.strip().startswith("SQLSTATE")][-1]
    assert last.startswith(f"safebunny.errors.{expected.__name__}: "), text[-2000:]
    assert "UnboundLocalError" not in text  # PySpark's follow-on error no longer hides ours
    error = safebunny.error_of(info.value)
    assert type(error) is expected, text
    assert error.__cause__ is info.value
    assert queue in str(error) and "not-the-password" not in str(error)
    if expected is BrokerAuthenticationError:
        assert f"{urlsplit(amqp_uri).hostname}:{urlsplit(amqp_uri).port} " in str(error)
