"""Two queries sharing a journalLocation are refused before either serves or acks the other's messages; the
journal's id travels in the offsets, so restarts (before and after Spark logged batch 0) and checkpoints written
before journal ids keep working. The reader is driven as Spark drives it (no JVM), against the real broker."""

import json

import pytest

from helpers import publish_numbered, queue_reader, queue_totals, wait_until
from safebunny.queues.journal_owner import OFFSET_KEY, OWNER_FILE, JournalOwnerError


def _serve(reader, start, end):
    return [m for p in reader.partitions(start, end) for b in reader.read(p) for m in b.to_pydict()["messageId"]]


def test_a_second_query_on_the_same_journal_location_is_refused_before_it_consumes(broker, amqp_uri, make_queue,
                                                                                   tmp_path):
    orders, payments = make_queue(suffix="-a"), make_queue(suffix="-b")
    publish_numbered(amqp_uri, orders, 200)
    publish_numbered(amqp_uri, payments, 200, start=1000)
    journal = str(tmp_path / "shared")
    a = queue_reader(amqp_uri, orders, journal, maxMessagesPerTrigger="100")
    b = queue_reader(amqp_uri, payments, journal, maxMessagesPerTrigger="100")
    try:
        start = a.initialOffset()
        end = a.latestOffset(start, a.getDefaultReadLimit())
        assert end[OFFSET_KEY]
        with pytest.raises(JournalOwnerError) as info:
            b.latestOffset(b.initialOffset(), b.getDefaultReadLimit())
        message = str(info.value)
        assert info.value.option == "journalLocation" and journal in message and orders in message
        assert "its own 'journalLocation'" in message
        assert _serve(a, start, end) == [f"m{i}" for i in range(100)]  # its own messages, not the other's
        nxt = a.latestOffset(end, a.getDefaultReadLimit())
        a.commit(end)
        assert nxt[OFFSET_KEY] == end[OFFSET_KEY]
        wait_until(lambda: queue_totals(broker, orders) == (0, 100), what="a0..a99 acked, the next 100 held")
        # the refused query never took a message: nothing of its queue is unacked, let alone acked
        assert queue_totals(broker, payments) == (200, 0)
        # a query with another checkpoint is refused even after the owner stopped: its batch is in an offset log
        a.stop()
        late = queue_reader(amqp_uri, payments, journal, maxMessagesPerTrigger="100")
        with pytest.raises(JournalOwnerError, match="carries no journal id"):
            late.latestOffset(late.initialOffset(), late.getDefaultReadLimit())
        late.stop()
    finally:
        a.stop()
        b.stop()


def test_a_restart_before_spark_logged_batch_0_takes_its_location_back(amqp_uri, make_queue, tmp_path):
    # the driver died after claiming the location and journaling batch 0, before Spark logged it: the restart
    # begins at the initial offset again, without an id, and must not be locked out
    queue = make_queue()
    publish_numbered(amqp_uri, queue, 50)
    journal = str(tmp_path / "j")
    first = queue_reader(amqp_uri, queue, journal, maxMessagesPerTrigger="50")
    lost = first.latestOffset(first.initialOffset(), first.getDefaultReadLimit())
    first.stop()
    again = queue_reader(amqp_uri, queue, journal, maxMessagesPerTrigger="50")
    try:
        start = again.initialOffset()
        end = again.latestOffset(start, again.getDefaultReadLimit())
        assert end[OFFSET_KEY] != lost[OFFSET_KEY] and end["seq"] == 50
        assert sorted(_serve(again, start, end)) == sorted(f"m{i}" for i in range(50))
        # Spark replays batch 0 in a new process: start is the initial offset, end carries the id
        replay = queue_reader(amqp_uri, queue, journal)
        assert sorted(_serve(replay, replay.initialOffset(), end)) == sorted(f"m{i}" for i in range(50))
        replay.stop()
    finally:
        again.stop()


def test_offsets_without_a_journal_id_from_older_checkpoints_keep_working(broker, amqp_uri, make_queue, tmp_path):
    queue = make_queue()
    publish_numbered(amqp_uri, queue, 60)
    journal = tmp_path / "j"
    old = queue_reader(amqp_uri, queue, str(journal), maxMessagesPerTrigger="30")
    start = old.initialOffset()
    end = old.latestOffset(start, old.getDefaultReadLimit())
    old.stop()
    # what an older version left: the same batch files, no owner file, offsets without an id
    (journal / OWNER_FILE).unlink()
    legacy_end = {k: v for k, v in end.items() if k != OFFSET_KEY}
    reader = queue_reader(amqp_uri, queue, str(journal), maxMessagesPerTrigger="30")
    try:
        assert len(_serve(reader, start, legacy_end)) == 30  # the replay of a logged batch
        nxt = reader.latestOffset(legacy_end, reader.getDefaultReadLimit())
        reader.commit(legacy_end)
        assert nxt["seq"] == 60 and nxt[OFFSET_KEY]  # from now on the offsets carry the location's owner
        assert json.loads((journal / OWNER_FILE).read_text())["id"] == nxt[OFFSET_KEY]
        assert len(_serve(reader, legacy_end, nxt)) == 30
        last = reader.latestOffset(nxt, reader.getDefaultReadLimit())  # the legacy batch's 30, redelivered
        reader.commit(nxt)
        assert last["seq"] == 90 and last[OFFSET_KEY] == nxt[OFFSET_KEY]
        wait_until(lambda: queue_totals(broker, queue) == (0, 30), what="the batch (30, 60] acked")
    finally:
        reader.stop()
