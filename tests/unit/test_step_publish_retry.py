"""A step republishes its emits (the same rows, so the same ids) while the broker fails them, up to
``publish_retry_seconds``; a refused password or a missing vhost fails at once; a large batch goes out from
the executors, whose Spark-wrapped errors are mapped back to safebunny's (the retry loop alone, publishing
stubbed)."""

from types import SimpleNamespace

import pyarrow as pa
import pytest

import safebunny.exactly_once.emits.retrying_publisher as publisher_module
from safebunny.errors import (
    BrokerAuthenticationError,
    SafeBunnyBrokerError,
    SafeBunnyOptionError,
    SafeBunnyPublishError,
    VhostNotFoundError,
)
from safebunny.exactly_once.emits.retrying_publisher import (
    DEFAULT_THRESHOLD,
    EmitPublisher,
    PublishSettings,
    has_remote_executors,
    partitions_for,
    threshold_for,
)
from safebunny.exactly_once.protocol.settings import StepSettings
from safebunny.exactly_once.protocol.step import Step
from safebunny.options.connection import ConnectionSettings
from safebunny.options.sink import PublishOptions, SinkOptions, sink_options

ROWS = pa.table({"value": [b"x"], "messageId": ["id-1"], "routingKey": ["q"]})
TWO_ROWS = pa.concat_tables([ROWS, ROWS])  # over an executor threshold of 1
URI = "amqp://guest:guest@127.0.0.1:5672/%2F"


def _publisher(seconds, threshold=None):
    return EmitPublisher("billing", PublishSettings(sink=SinkOptions(connection=ConnectionSettings(URI)),
                                                    retry_seconds=seconds, executor_publish_rows=threshold,
                                                    executor_partition_rows=2))


def _stub(monkeypatch, failures, name="publish_table"):
    calls, naps = [], []

    def publish(*args):
        calls.append(args)
        if len(calls) <= len(failures):
            raise failures[len(calls) - 1]
        return 3

    monkeypatch.setattr(publisher_module, name, publish)
    monkeypatch.setattr(publisher_module.time, "sleep", naps.append)
    return calls, naps


def test_a_failing_publish_is_repeated_with_the_same_rows(monkeypatch):
    calls, naps = _stub(monkeypatch, [SafeBunnyBrokerError("down"), SafeBunnyPublishError("nack")])
    published = _publisher(60).publish(None, ROWS, "step:billing/E/3")
    assert len(calls) == 3 and all(rows is ROWS and scope == "step:billing/E/3" for rows, _o, scope in calls)
    assert naps == [0.5, 1.0]
    assert (published.where, published.partitions, published.attempts) == ("driver", 1, 3)


def test_the_batch_fails_once_the_retry_time_is_spent(monkeypatch):
    calls, _ = _stub(monkeypatch, [SafeBunnyBrokerError("down")] * 10)
    with pytest.raises(SafeBunnyBrokerError, match=r"could not publish .* 1 emitted messages from the driver.*down"):
        _publisher(0).publish(None, ROWS, "s")
    assert len(calls) == 1


@pytest.mark.parametrize("error", [BrokerAuthenticationError("refused"), VhostNotFoundError("no vhost")])
def test_a_refused_password_or_a_missing_vhost_is_not_retried(monkeypatch, error):
    calls, _ = _stub(monkeypatch, [error])
    with pytest.raises(type(error)):
        _publisher(60).publish(None, ROWS, "s")
    assert len(calls) == 1


class _SparkError(Exception):
    """What a failed write raises on the driver: the worker's traceback as text."""


def _wrapped(error: Exception) -> _SparkError:
    return _SparkError(f"Job aborted.\nTraceback (most recent call last):\n  ...\n"
                       f"{type(error).__module__}.{type(error).__name__}: {error}\n\tat org.apache.spark...")


def test_executor_publish_errors_are_mapped_and_retried(monkeypatch):
    calls, naps = _stub(monkeypatch, [_wrapped(SafeBunnyPublishError("returned as unroutable"))],
                        "publish_from_executors")
    published = _publisher(60, threshold=1).publish(object(), TWO_ROWS, "s")
    assert len(calls) == 2 and naps == [0.5]
    assert (published.where, published.partitions, published.attempts) == ("executors", 3, 2)


def test_executor_publish_fails_in_our_error_class(monkeypatch):
    _stub(monkeypatch, [_wrapped(BrokerAuthenticationError("refused the login"))] * 3, "publish_from_executors")
    with pytest.raises(BrokerAuthenticationError, match="from the executors.*refused the login") as info:
        _publisher(60, threshold=1).publish(object(), TWO_ROWS, "s")
    assert isinstance(info.value.__cause__, _SparkError)


def test_an_executor_failure_that_is_not_the_broker_is_raised_as_is(monkeypatch):
    calls, _ = _stub(monkeypatch, [_SparkError("executor lost")], "publish_from_executors")
    with pytest.raises(_SparkError, match="executor lost"):
        _publisher(60, threshold=1).publish(object(), TWO_ROWS, "s")
    assert len(calls) == 1


@pytest.mark.parametrize("threshold, rows, executors", [(None, 10**6, False), (0, 10**6, False), (100, 100, False),
                                                        (100, 101, True)])
def test_only_batches_over_the_threshold_go_to_the_executors(threshold, rows, executors):
    assert _publisher(1, threshold).from_executors(rows) is executors


@pytest.mark.parametrize("rows, per, parallelism, want", [(10_000, 2500, 2, 2), (10_000, 2500, 8, 4),
                                                          (10_000, 2500, None, 4), (1, 2500, 8, 1),
                                                          (2501, 2500, 8, 2), (0, 10, 2, 1)])
def test_partitions_are_one_per_partition_rows_capped_by_the_parallelism(rows, per, parallelism, want):
    assert partitions_for(rows, per, parallelism) == want


def test_executor_options_keep_the_password_out_of_the_uri():
    def executor_options(uri, password, publish=None):
        return sink_options(ConnectionSettings(uri, password), publish or PublishOptions()).spark_options()

    assert executor_options("amqp://app:s%2Fx@h:5672/%2F", None, PublishOptions(confirm_timeout_ms=5)) == {
        "uri": "amqp://app@h:5672/%2F", "password": "s/x", "confirmTimeoutMs": "5"}
    assert executor_options("amqp://app:old@h/v", "new")["password"] == "new"
    assert "password" not in executor_options("amqp://h/v", None)


def test_step_checks_its_executor_options(tmp_path):
    with pytest.raises(SafeBunnyOptionError, match="executor_partition_rows"):
        Step("billing", str(tmp_path / "inbox"), StepSettings(
                connection=ConnectionSettings(URI), executor_partition_rows=0))
    assert Step("billing", str(tmp_path / "inbox"), StepSettings(
        connection=ConnectionSettings(URI), executor_publish_rows=None)).settings.executor_publish_rows is None


def _session(master):
    return SimpleNamespace(sparkContext=SimpleNamespace(master=master))


@pytest.mark.parametrize("master, remote", [("local[2]", False), ("local", False), ("local[*]", False),
                                            ("local-cluster[2,1,1024]", True), ("spark://h:7077", True),
                                            ("yarn", True)])
def test_auto_publishes_from_the_executors_only_where_they_are_processes_of_their_own(master, remote):
    assert has_remote_executors(_session(master)) is remote
    assert threshold_for("auto", _session(master)) == (DEFAULT_THRESHOLD if remote else None)
    assert threshold_for(30, _session(master)) == 30 and threshold_for(0, _session(master)) is None
    publisher = _publisher(1, "auto")
    assert publisher.from_executors(DEFAULT_THRESHOLD + 1, _session(master)) is remote
    assert publisher.from_executors(DEFAULT_THRESHOLD, _session(master)) is False


def test_a_master_that_cannot_be_read_counts_as_a_cluster():
    class Refusing:
        @property
        def sparkContext(self):  # noqa: N802 - SparkSession's attribute
            raise RuntimeError("JVM_ATTRIBUTE_NOT_SUPPORTED")

    assert has_remote_executors(Refusing()) is True


def test_step_refuses_an_executor_threshold_that_is_no_number(tmp_path):
    with pytest.raises(SafeBunnyOptionError, match="executor_publish_rows must be 'auto'.*'many'"):
        Step("billing", str(tmp_path / "inbox"), StepSettings(
                connection=ConnectionSettings(URI), executor_publish_rows="many"))
    assert Step("billing", str(tmp_path / "inbox"), StepSettings(
            connection=ConnectionSettings(URI))).settings.executor_publish_rows == "auto"


def test_step_settings_are_one_object_and_a_uri_in_their_place_is_refused_without_showing_it(tmp_path):
    with pytest.raises(SafeBunnyOptionError, match=r"StepSettings\(connection=safebunny.ConnectionSettings") as caught:
        Step("billing", str(tmp_path / "inbox"), "amqp://app:s3cret@h/%2F")  # the third argument before issue 49
    assert caught.value.option == "settings" and "s3cret" not in str(caught.value)
    with pytest.raises(SafeBunnyOptionError, match="publish_options must be a safebunny.PublishOptions"):
        StepSettings(connection=ConnectionSettings(URI), publish_options={"confirmTimeoutMs": "5"})
    settings = StepSettings(connection=ConnectionSettings("amqp://app:s3cret@h/%2F"),
                            publish_options=PublishOptions(confirm_timeout_ms=5))
    sink = settings.publishing("billing").sink
    assert (sink.confirm_timeout_ms, sink.connection.connection_name) == (5, "safebunny/billing/publisher")
    assert "s3cret" not in repr(settings) and "s3cret" not in repr(sink)


@pytest.mark.parametrize("old", ["uri", "password", "connection_name"])
def test_the_connection_keywords_of_earlier_releases_name_the_connection_settings(old):
    new_form = r"StepSettings\(connection=safebunny.ConnectionSettings\(uri"
    with pytest.raises(SafeBunnyOptionError, match=new_form) as caught:
        StepSettings(**{old: "amqp://app:s3cret@h/%2F"})
    assert caught.value.option == old and "s3cret" not in str(caught.value)
