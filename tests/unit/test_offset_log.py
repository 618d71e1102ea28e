"""``source.offset.logged_seq``: the queue source's sequence number in a file of Spark's offset log, and None for
anything else (the step then collects the batch with Spark)."""

from __future__ import annotations

import pytest

from safebunny.queues.offset import logged_seq as offset_seq


@pytest.mark.parametrize("text, seq", [
    ('v1\n{"batchWatermarkMs":0}\n{"seq":40,"tick":3,"journal":"j"}', 40),
    ('v1\n{"batchWatermarkMs":0}\n{"seq":0,"tick":0}\n', 0),
    ('v1\n{"batchWatermarkMs":0}\n{"partitions":{"0":5}}', None),  # another source's offset
    ('v1\n{"batchWatermarkMs":0}\n{"seq":1,"tick":0}\n{"seq":2,"tick":0}', None),  # two sources
    ('v1\n{"batchWatermarkMs":0}\n{"seq":"7","tick":0}', None),
    ('v1\n{"batchWatermarkMs":0}\nnot json', None),
    ("", None),
])
def test_offset_seq_reads_only_a_queue_source_s_offset(text: str, seq: int | None) -> None:
    assert offset_seq(text) == seq
