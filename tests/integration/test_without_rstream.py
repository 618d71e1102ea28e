"""Without rstream importable, broker errors are still our clear errors and classic queues still read.

Each case runs in a child process where ``sys.modules['rstream'] = None`` (as if safebunny were
installed without it), against the real broker; the probe case needs the stream plugin to answer,
because that is where the old probe imported rstream.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from urllib.parse import urlsplit

import pytest

from conftest import use_stream_broker
from safebunny.streams.stream_source import stream_protocol_answers

# streams need the stream plugin: a broker that has it (a throwaway one when the run's broker lacks it)
broker, amqp_uri = use_stream_broker()


def _without_rstream(code: str, **values: object) -> dict:
    script = ("import sys, json\nsys.modules['rstream'] = None\nV = json.loads(sys.argv[1])\n"
              + textwrap.dedent(code))
    done = subprocess.run([sys.executable, "-c", script, json.dumps(values)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _wrong_password(uri: str) -> str:
    parts = urlsplit(uri)
    return uri.replace(f"{parts.username}:{parts.password}@", f"{parts.username}:not-the-password@", 1)


def test_wrong_password_and_missing_queue_give_clear_errors(amqp_uri, unique_name):
    got = _without_rstream("""
        from safebunny.amqp.connection import open_blocking
        from safebunny.queues.consumer import QueueConsumer
        out = {}
        for what, fn in [("password", lambda: open_blocking(V["bad"], name="safebunny/test")),
                         ("queue", lambda: QueueConsumer(V["uri"], V["missing"], 10).start())]:
            try:
                fn()
                out[what] = "no error"
            except Exception as exc:
                out[what] = f"{type(exc).__name__}: {exc}"
        print(json.dumps(out))
    """, bad=_wrong_password(amqp_uri), uri=amqp_uri, missing=f"{unique_name}-missing")
    assert got["password"].startswith("BrokerAuthenticationError: ") and "not-the-password" not in got["password"]
    assert got["queue"].startswith("QueueNotFoundError: ") and f"{unique_name}-missing" in got["queue"]


def test_probe_of_a_classic_queue_with_the_stream_port_answering(broker, amqp_uri, make_queue):
    port = broker.stream_port or 5552
    if not stream_protocol_answers(urlsplit(amqp_uri).hostname, port):
        pytest.fail(f"the stream plugin does not answer on port {port}; this test needs it")
    classic, stream = make_queue("classic"), make_queue("stream")
    got = _without_rstream("""
        from safebunny.streams.probe import detect_queue_type
        from safebunny.streams.stream_source import open_stream_client
        with open_stream_client(V["uri"], V["port"]) as client:
            protocol = client.protocol
        print(json.dumps({"classic": detect_queue_type(V["uri"], V["classic"], V["port"]),
                          "stream": detect_queue_type(V["uri"], V["stream"], V["port"]), "protocol": protocol}))
    """, uri=amqp_uri, port=port, classic=classic, stream=stream)
    assert got == {"classic": "classic", "stream": "stream", "protocol": "amqp"}
