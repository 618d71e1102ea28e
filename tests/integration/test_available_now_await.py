"""An availableNow run with ``availableNowAwaitFile`` does not end while the file is absent: it reads what
arrives meanwhile, and once the file is there it reads what the queue holds then and ends (real broker; the
reader driven as Spark drives it). ``saga.drain`` runs a step fed by other steps this way."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from helpers import publish_numbered, queue_reader
from pyspark_safebunny.queue_reader import ReadAllAvailable
from safebunny.storage.pause import write_await_file


def _run(reader, batches: list[int]) -> int:
    """Spark's availableNow loop: plan, commit, until the reader says nothing more; the messages read."""
    offset, limit = reader.initialOffset(), ReadAllAvailable()
    while True:
        end = reader.latestOffset(offset, limit)
        if end == offset:
            return offset["seq"]
        batches.append(end["seq"] - offset["seq"])
        reader.commit(end)
        offset = end


def test_a_run_reads_what_arrives_until_its_file_is_there_then_ends(amqp_uri, make_queue, tmp_path: Path):
    queue, gate = make_queue(), str(tmp_path / "control" / "gate")
    publish_numbered(amqp_uri, queue, 3)
    reader = queue_reader(amqp_uri, queue, str(tmp_path / "journal"), pollTimeoutMs="200",
                          availableNowAwaitFile=gate)
    read: list[int] = []
    batches: list[int] = []
    try:
        reader.prepareForTriggerAvailableNow()
        runner = threading.Thread(target=lambda: read.append(_run(reader, batches)), daemon=True)
        runner.start()
        time.sleep(1.5)
        assert runner.is_alive(), "the run ended with its file absent"
        publish_numbered(amqp_uri, queue, 4, start=3)  # after the start count: read all the same
        time.sleep(1.5)
        assert runner.is_alive() and sum(batches) == 7, f"batches so far {batches}"
        write_await_file(gate)
        runner.join(30)
        assert not runner.is_alive(), "the run ended once its file was there"
        assert read == [7]
    finally:
        write_await_file(gate)
        reader.stop()


def test_a_run_whose_file_is_there_at_its_start_is_a_plain_available_now_run(amqp_uri, make_queue, tmp_path: Path):
    queue, gate = make_queue(), str(tmp_path / "gate")
    write_await_file(gate)
    publish_numbered(amqp_uri, queue, 5)
    reader = queue_reader(amqp_uri, queue, str(tmp_path / "journal"), pollTimeoutMs="200",
                          availableNowAwaitFile=gate)
    try:
        reader.prepareForTriggerAvailableNow()
        started = time.monotonic()
        assert _run(reader, []) == 5
        assert time.monotonic() - started < 20
    finally:
        reader.stop()
