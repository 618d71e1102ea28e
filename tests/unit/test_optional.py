"""Optional imports: what to install is said, and error translation never needs an optional package."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from safebunny.errors import SafeBunnyError, SafeBunnyMissingDependencyError
from safebunny.optional import available, optional_classes, require


def test_require_names_the_package_and_the_install_line():
    with pytest.raises(SafeBunnyMissingDependencyError) as info:
        require("safebunny_no_such_package.sub", "do something useful")
    text = str(info.value)
    assert "'safebunny_no_such_package'" in text and "do something useful" in text and "pip install" in text
    assert isinstance(info.value, ImportError) and isinstance(info.value, SafeBunnyError)


@pytest.mark.parametrize("module, words", [("rstream", ["'rstream>=0.20'"]),
                                           ("testcontainers", ["'testcontainers[rabbitmq]'"]),
                                           ("psutil", ["'psutil'", "safebunny[bench]"])])
def test_known_packages_say_what_to_install(monkeypatch, module, words):
    monkeypatch.setitem(sys.modules, module, None)  # as if not installed
    with pytest.raises(SafeBunnyMissingDependencyError) as info:
        require(module, "test")
    for word in words:
        assert word in str(info.value)


def test_available_and_optional_classes_without_the_package(monkeypatch):
    for name in ("rstream", "rstream.exceptions", "rstream.client"):
        monkeypatch.setitem(sys.modules, name, None)
    assert not available("rstream.client")
    assert optional_classes("rstream.exceptions", "AuthenticationFailure") == ()


def _run_without_rstream(code: str) -> subprocess.CompletedProcess:
    script = "import sys\nsys.modules['rstream'] = None\n" + textwrap.dedent(code)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)


def test_broker_error_translation_works_without_rstream():
    """The audit's e13: without rstream, broker_error raised ModuleNotFoundError for every error."""
    done = _run_without_rstream("""
        import pika.exceptions as pe
        from pika.spec import Channel
        from safebunny.amqp.connection import StreamEndpoint, broker_error
        from safebunny.errors import (BrokerAuthenticationError, BrokerUnreachableError, QueueNotFoundError,
                                      SafeBunnyBrokerError, VhostNotFoundError)
        ep = StreamEndpoint.from_uri("amqp://u:TOPSECRET@h:5672/%2F")
        cases = [
            (pe.ProbableAuthenticationError("x"), BrokerAuthenticationError),
            (pe.ConnectionClosedByBroker(403, "ACCESS_REFUSED - Login was refused"), BrokerAuthenticationError),
            (pe.ProbableAccessDeniedError("x"), VhostNotFoundError),
            (pe.ChannelClosedByBroker(404, "NOT_FOUND - no queue 'q'"), QueueNotFoundError),
            (ConnectionRefusedError(111, "refused"), BrokerUnreachableError),
        ]
        for exc, kind in cases:
            got = broker_error(exc, ep, "consume", "q")
            assert type(got) is kind, (exc, got)
            assert "TOPSECRET" not in str(got)
        print("ok")
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_a_broker_sent_close_is_not_reported_as_unreachable():
    """A connection.close from the broker (320 CONNECTION_FORCED) said 'Cannot reach RabbitMQ'."""
    import pika.exceptions as pe

    from safebunny.amqp.connection import StreamEndpoint, broker_error
    from safebunny.errors import BrokerUnreachableError

    got = broker_error(pe.ConnectionClosedByBroker(320, "CONNECTION_FORCED - Closed via management plugin"),
                       StreamEndpoint.from_uri("amqp://u:p@h:5672/%2F"), "consume")
    assert not isinstance(got, BrokerUnreachableError)
    assert "closed the connection" in str(got) and "320" in str(got) and "CONNECTION_FORCED" in str(got)
    assert "Cannot reach" not in str(got) and got.reply_code == 320
