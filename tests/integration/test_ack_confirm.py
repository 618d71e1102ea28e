"""Acks are written off the batch's path and confirmed before the reader says nothing is left.

Spark may end the reader's process right after an availableNow run's last commit without calling ``stop``.
The acks of the run must have reached the broker by then: this kills the process the moment ``latestOffset``
reports nothing more for the run, with deliveries still arriving on the socket, and checks that exactly the
run's messages are gone. It fails if acks were held back (until ``stop``, or the next batch); the race the
round trip in ``confirm_acks`` closes (an ack still queued for the I/O thread when the process dies) is too
narrow to provoke on purpose, so that step is covered by reading, not by this test.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from helpers import publish_numbered, queue_totals, wait_until

DRIVER = textwrap.dedent("""
    import os, signal, sys
    sys.path.insert(0, {tests!r})
    from helpers import publish_numbered, queue_reader

    reader = queue_reader({uri!r}, {queue!r}, {journal!r}, maxMessagesPerTrigger="{batch}")
    reader.prepareForTriggerAvailableNow()  # the run reads the {n} messages there now
    publish_numbered({uri!r}, {queue!r}, {more}, start={n})  # and more arrive: unread in the socket at the end
    offset, limit = reader.initialOffset(), reader.getDefaultReadLimit()
    while True:  # Spark's loop, each batch committed before the next is planned
        end = reader.latestOffset(offset, limit)
        if end == offset:
            break  # nothing more for this run: Spark ends the query (and may end this process at once)
        reader.partitions(offset, end)
        reader.commit(end)
        offset = end
    print("read", offset["seq"], flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
""")


def test_the_last_commits_ack_survives_the_process_ending_right_after_an_available_now_run(
        broker, amqp_uri, make_queue, tmp_path: Path) -> None:
    queue = make_queue()
    n, more, batch = 400, 3000, 100
    publish_numbered(amqp_uri, queue, n)
    script = DRIVER.format(tests=str(Path(__file__).parents[1]), uri=amqp_uri, queue=queue,
                           journal=str(tmp_path / "journal"), batch=batch, n=n, more=more)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert f"read {n}" in run.stdout, run.stdout[-500:] + run.stderr[-2000:]
    # the connection is gone with the process: what the broker holds now is final
    wait_until(lambda: queue_totals(broker, queue)[1] == 0, what="the dead reader's deliveries released")
    assert queue_totals(broker, queue) == (more, 0)
