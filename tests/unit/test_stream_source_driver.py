"""The stream queue source's driver logic without Spark or a broker (safebunny.streams.stream_source): read
limits, availableNow, anchors, a stream replaced under a checkpoint, and the kept driver connection."""

import pickle

import pytest

from safebunny.errors import QueueNotFoundError, SafeBunnyBrokerError, SafeBunnyDataLossError
from safebunny.options import typed
from safebunny.options.connection import ConnectionSettings
from safebunny.options.source import SourceOptions
from safebunny.streams.offsets import ANCHOR_KEY, RESET_KEY, StreamBounds, make_anchor
from safebunny.streams.stream_source import DriverConnection, StreamSource

OPTIONS = {"uri": "amqp://h/%2F", "queue": "s", "streamPort": 5552, "heartbeatSeconds": 30, "pollTimeoutMs": 300,
           "startingOffsets": "earliest", "failOnDataLoss": True}


class FakeClient:
    """A stream holding ``bodies[first:]`` at offsets ``first..len(bodies)-1``."""

    def __init__(self, bodies, first=0, avg=10.0):
        self.bodies, self.first, self.avg = bodies, first, avg
        self.closed = False
        self.fail = []  # errors the next calls raise, in order

    def _maybe_fail(self):
        if self.fail:
            raise self.fail.pop(0)

    def bounds(self, queue, wait):
        self._maybe_fail()
        return StreamBounds(self.first, len(self.bodies), self.avg)

    def first_message_from(self, queue, offset, wait):
        offset = max(offset, self.first)
        return (offset, self.bodies[offset]) if offset < len(self.bodies) else None

    def offset_for_timestamp(self, queue, stamp, wait, stored=False):
        return stamp // 1000

    def close(self):
        self.closed = True


def _source(client, **options):
    opened = []

    def opener(uri, port, heartbeat, name):
        opened.append(client)
        return client

    merged = typed(SourceOptions, {**OPTIONS, **options}, connection=ConnectionSettings(OPTIONS["uri"]))
    source = StreamSource(merged, DriverConnection(merged, opener))
    return source, opened


def test_read_limits_cap_the_end_and_a_stream_with_nothing_new_returns_the_start():
    source, _ = _source(FakeClient([b"m%d" % i for i in range(20)]))
    assert source.initial() == {"offset": 0}
    assert source.latest({"offset": 0}, max_messages=7)["offset"] == 7
    assert source.latest_tail == 20
    assert source.latest({"offset": 0}, max_bytes=30)["offset"] == 3  # about 3 messages of 10 bytes
    assert source.latest({"offset": 3})["offset"] == 20
    assert source.latest({"offset": 3}, min_rows=50) == {"offset": 3}
    assert source.latest({"offset": 3}, min_rows=5)["offset"] == 20
    assert source.latest({"offset": 20}) == {"offset": 20}


def test_each_end_carries_the_anchor_of_the_message_before_it():
    source, _ = _source(FakeClient([b"a", b"b", b"c"]))
    assert source.latest({"offset": 0})[ANCHOR_KEY] == make_anchor(2, b"c")


def test_available_now_reads_to_the_tail_found_when_prepared():
    client = FakeClient([b"m"] * 10)
    source, _ = _source(client)
    source.prepare_available_now()
    client.bodies += [b"later"] * 5
    assert source.latest({"offset": 4}, min_rows=50)["offset"] == 10  # min_rows does not hold an availableNow run
    assert source.latest({"offset": 10}) == {"offset": 10}


def test_a_stream_replaced_under_the_checkpoint_is_data_loss():
    source, _ = _source(FakeClient([b"new0", b"new1", b"new2", b"new3"]))
    checkpoint = {"offset": 3, ANCHOR_KEY: make_anchor(2, b"old2")}
    assert "is not the one stored there now" in source.replaced(checkpoint, 3, StreamBounds(0, 4))
    with pytest.raises(SafeBunnyDataLossError, match="Restart the query from a new checkpoint"):
        source.latest(checkpoint)
    assert source.replaced({"offset": 3, ANCHOR_KEY: make_anchor(2, b"new2")}, 3, StreamBounds(0, 4)) is None
    assert source.replaced({"offset": 3}, 3, StreamBounds(0, 4)) is None  # no anchor: cannot tell


def test_a_checkpoint_beyond_the_tail_is_data_loss_unless_it_is_the_starting_offset():
    source, _ = _source(FakeClient([b"x"] * 2))
    assert "Offsets never go backwards" in source.replaced({"offset": 9}, 9, StreamBounds(0, 2))
    waiting, _ = _source(FakeClient([b"x"] * 2), startingOffsets=9)
    assert waiting.replaced({"offset": 9}, 9, StreamBounds(0, 2)) is None
    assert waiting.latest({"offset": 9}) == {"offset": 9}  # it waits for the stream to get there


def test_without_fail_on_data_loss_a_replaced_stream_goes_on_from_its_first_offset():
    source, _ = _source(FakeClient([b"n"] * 5, first=1), failOnDataLoss=False)
    end = source.latest({"offset": 30})
    assert end["offset"] == 5 and end[RESET_KEY] == 1


def test_the_connection_is_kept_retried_once_on_a_broker_error_and_dropped_on_a_definite_answer():
    client = FakeClient([b"x"] * 3)
    source, opened = _source(client)
    source.latest({"offset": 0})
    source.latest({"offset": 0})
    assert len(opened) == 1  # kept between calls
    client.fail = [SafeBunnyBrokerError("lost")]
    assert source.latest({"offset": 0})["offset"] == 3 and len(opened) == 2 and client.closed  # retried once
    client.fail = [QueueNotFoundError("gone")]
    with pytest.raises(QueueNotFoundError):
        source.latest({"offset": 0})
    assert source.driver().client is None


def test_an_idle_connection_is_replaced_and_none_is_pickled():
    client = FakeClient([b"x"])
    source, opened = _source(client)
    source.latest({"offset": 0})
    source.driver().used -= DriverConnection.MAX_IDLE_S + 1
    source.latest({"offset": 0})
    assert len(opened) == 2
    source.driver().opener = None  # not picklable: the copy must not carry the connection
    copy = pickle.loads(pickle.dumps(source))
    assert copy._connection is None and copy.latest_tail == 1
