"""The run leaves nothing behind on the machine's broker: the queues and exchanges present when the run ends that
were not there when it began are named, and the run fails (``conftest.pytest_sessionfinish``, on the controller).

Only the broker already running on 127.0.0.1:5672 is checked (a throwaway broker is deleted whole, and one named by
``SAFEBUNNY_TEST_AMQP_URI`` may be shared with others); ``SAFEBUNNY_TEST_LEAK_CHECK=0`` turns it off, for a run
beside another one on the same broker.
"""

from __future__ import annotations

import os
import subprocess

from brokers import amqp_answers

__all__ = ["broker_objects", "left_behind"]

LOCAL = "amqp://guest:guest@127.0.0.1:5672/%2F"


def broker_objects() -> set[str] | None:
    """``queue <name>`` and ``exchange <name>`` for every queue and non-default exchange of the local broker's
    ``/`` vhost, or None when this run does not check (another broker, the check off, rabbitmqctl refused)."""
    if os.environ.get("SAFEBUNNY_TEST_LEAK_CHECK", "1") == "0" or os.environ.get("SAFEBUNNY_TEST_AMQP_URI"):
        return None
    if not amqp_answers(LOCAL):
        return None
    found: set[str] = set()
    for kind in ("queue", "exchange"):
        try:
            out = subprocess.run(["rabbitmqctl", "-q", f"list_{kind}s", "--no-table-headers", "name"],
                                 capture_output=True, text=True, timeout=60, check=True).stdout
        except (OSError, subprocess.SubprocessError):
            return None
        found |= {f"{kind} {name}" for name in out.split("\n")
                  if name.strip() and not name.startswith("amq.")}
    return found


def left_behind(before: set[str] | None) -> list[str]:
    """What the run created on the local broker and did not delete."""
    if before is None:
        return []
    after = broker_objects()
    return sorted(after - before) if after is not None else []
