"""A queue with a single active consumer (a sharded saga step's) read by the source on a real broker.

Cancelling and restarting the consumer, as the byte budget does to learn the body size, hands such a queue
to the next waiting consumer; on a quorum queue the restarted one then waits behind the cancelled one's
unacked message, and batches shrank to one message (about 20 a second). With ``singleActiveConsumer`` the
reader consumes with its full prefetch from the start."""

from __future__ import annotations

from helpers import publish_numbered, queue_reader
from pyspark_safebunny.queue_reader import ReadMaxRows

N = 3000


def test_a_single_active_consumer_queue_is_read_in_full_batches(amqp_uri, make_queue, tmp_path):
    queue = make_queue("quorum", {"x-single-active-consumer": True})
    publish_numbered(amqp_uri, queue, N)
    reader = queue_reader(amqp_uri, queue, str(tmp_path / "journal"), queueType="quorum",
                          singleActiveConsumer="true", maxMessagesPerTrigger="500")
    try:
        offset, sizes = reader.initialOffset(), []
        while offset["seq"] < N and len(sizes) < 60:
            end = reader.latestOffset(offset, ReadMaxRows(500))
            if end["seq"] > offset["seq"]:
                sizes.append(end["seq"] - offset["seq"])
            reader.commit(end)
            offset = end
        assert offset["seq"] == N, sizes
        assert len(sizes) <= 12 and max(sizes) == 500, sizes  # full batches, not one message at a time
        assert reader.source._consumer.effective_prefetch == 1000  # twice the batch, from the first delivery
    finally:
        reader.stop()
