"""kill -9 of the whole driver while it reads a stream queue, then a restart from the same checkpoint."""

import signal

import pytest
from test_source_crash import N, _batches, _done, _fill, _run

from conftest import use_stream_broker

pytestmark = pytest.mark.xdist_group("drivers")  # tests/xdist_units.py: drivers of their own

# streams need the stream plugin: a broker that has it (a throwaway one when the run's broker lacks it)
broker, amqp_uri = use_stream_broker()


def test_stream_queue_crash_and_restart_replays_the_same_offsets_exactly_once(broker, amqp_uri, make_queue,
                                                                             tmp_path):
    queue = make_queue("stream")
    _fill(amqp_uri, queue)
    crashed = _run(amqp_uri, queue, tmp_path, "effect:2", queue_type="stream", stream_port=broker.stream_port)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-2000:]
    finished = _run(amqp_uri, queue, tmp_path, queue_type="stream", stream_port=broker.stream_port)
    assert finished.returncode == 0 and _done(finished, tmp_path), finished.stderr[-3000:]
    batches = _batches(tmp_path)
    replayed = [runs for runs in batches.values() if len(runs) == 2]
    assert replayed and all(list(runs.values())[0] == list(runs.values())[1] for runs in replayed)
    final = [m for _, runs in sorted(batches.items()) for m, _ in runs[max(runs)]]
    # a stream is read by offset: every message exactly once, in order, none redelivered
    assert final == [f"m{i}" for i in range(N)]
