"""The consumer hands out deliveries in delivery-tag order, whatever the moment they arrived at.

Acks are ``multiple=True`` through the last delivery of a batch, so a delivery with a lower tag left in the
buffer behind a later one would be acked unread. Deliveries that arrive together with the consume-ok (a deep
queue, a large prefetch) once went through pika's BlockingChannel event queue and could land in the buffer
after deliveries that arrived later directly.
"""

from helpers import publish_numbered
from safebunny.queues.consumer import QueueConsumer


def test_a_deep_queue_is_buffered_in_tag_order_across_the_consumer_restart(amqp_uri, make_queue, admin):
    queue = make_queue()
    publish_numbered(amqp_uri, queue, 20_000, body=lambda i: b"%06d" % i)
    # a byte budget: prefetch 1 first, then a restart with a large prefetch into a deep queue
    consumer = QueueConsumer(amqp_uri, queue, prefetch=30_000, max_buffered_bytes=64 * 1024 * 1024).start()
    try:
        taken = []
        while len(taken) < 20_000:
            got = consumer.take(20_000 - len(taken), None, 5.0)
            assert got, f"stalled after {len(taken)} deliveries"
            taken += got
        tags = [d.delivery_tag for d in taken]
        assert tags == sorted(tags) and len(set(tags)) == len(tags)
        assert [d.body for d in taken] == [b"%06d" % i for i in range(20_000)]
        assert {d.generation for d in taken} == {1}  # no reconnect on the way
        assert consumer.acks.ack_through(1, tags[-1])
    finally:
        consumer.stop()
    assert admin.get_all(queue) == []
