"""The queue source's typed offset reads and writes exactly the JSON checkpoints already hold."""

import json

from safebunny.queues.offset import QueueOffset


def test_offsets_round_trip_key_for_key() -> None:
    for written in ({"seq": 0, "tick": 0}, {"seq": 42, "tick": 3}, {"seq": 42, "tick": 0, "journal": "q-7f3a"}):
        offset = QueueOffset.from_json(json.loads(json.dumps(written)))
        assert offset.to_json() == written
        assert json.dumps(offset.to_json()) == json.dumps(written)  # the same keys in the same order


def test_an_old_offset_without_tick_reads_as_tick_zero() -> None:
    assert QueueOffset.from_json({"seq": 9}) == QueueOffset(9, 0, None)
    assert QueueOffset.from_json({"seq": "9", "journal": ""}) == QueueOffset(9)
