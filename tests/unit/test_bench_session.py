"""The benches' shared teardown (``bench.session``): its order, that every step runs, SIGTERM/SIGINT turned into
exceptions that run it; and how a throwaway broker's leftover processes are found (``tests/brokers.py``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.broker import StreamBroker  # noqa: E402
from bench.session import BenchSession, bench_session  # noqa: E402
from brokers import end_processes, processes_with_env  # noqa: E402


class _Book:
    def __init__(self, log: list[str], name: str = "book") -> None:
        self.log, self.prefix, self.name = log, f"bench-{name}", name

    def close(self) -> None:
        self.log.append(f"{self.name} close")


class _Spark:
    def __init__(self, log: list[str], fail: bool = False, on_stop: object = None) -> None:
        self.log, self.fail, self.on_stop = log, fail, on_stop

    def stop(self) -> None:
        self.log.append("spark stop")
        if callable(self.on_stop):
            self.on_stop()
        if self.fail:
            raise RuntimeError("the JVM is gone")


def _session(log: list[str], spark: _Spark | None = None) -> BenchSession:
    session = bench_session("sb-test-session-")
    session.books.append(_Book(log))  # type: ignore[arg-type]
    session.keep_spark(spark or _Spark(log))
    session.brokers.append(StreamBroker("amqp://x", 1, "said", lambda: log.append("broker stop")))
    return session


def test_teardown_order_queues_then_spark_then_broker_then_folder() -> None:
    log: list[str] = []
    with _session(log) as session:
        workdir = session.workdir
        assert workdir.is_dir() and workdir.name.startswith("sb-test-session-")
    assert log == ["book close", "spark stop", "broker stop"]
    assert not workdir.exists()


def test_every_step_runs_when_one_fails(capsys: pytest.CaptureFixture[str]) -> None:
    log: list[str] = []
    with _session(log, _Spark(log, fail=True)) as session:
        workdir = session.workdir
    assert log == ["book close", "spark stop", "broker stop"]
    assert not workdir.exists()
    assert "stopping Spark failed: RuntimeError: the JVM is gone" in capsys.readouterr().err


def test_close_is_idempotent_and_the_folder_is_made_only_when_used() -> None:
    log: list[str] = []
    session = _session(log)
    session.close()
    session.close()
    assert log == ["book close", "spark stop", "broker stop"]
    assert session._workdir is None


def test_an_exception_of_the_bench_propagates_after_the_teardown() -> None:
    log: list[str] = []
    with pytest.raises(ValueError, match="boom"), _session(log):
        raise ValueError("boom")
    assert log == ["book close", "spark stop", "broker stop"]


def test_sigterm_raises_systemexit_143_runs_the_teardown_and_restores_the_handler() -> None:
    before = signal.getsignal(signal.SIGTERM)
    log: list[str] = []
    with pytest.raises(SystemExit) as ended, _session(log) as session:
        os.kill(os.getpid(), signal.SIGTERM)
        raise AssertionError("not reached: the handler raises")
    assert ended.value.code == 128 + signal.SIGTERM
    assert session.signalled == signal.SIGTERM
    assert log == ["book close", "spark stop", "broker stop"]
    assert signal.getsignal(signal.SIGTERM) is before


def test_sigint_raises_keyboardinterrupt() -> None:
    log: list[str] = []
    with pytest.raises(KeyboardInterrupt), _session(log):
        os.kill(os.getpid(), signal.SIGINT)
    assert log == ["book close", "spark stop", "broker stop"]


def test_a_signal_during_the_teardown_is_ignored(capsys: pytest.CaptureFixture[str]) -> None:
    log: list[str] = []
    with _session(log, _Spark(log, on_stop=lambda: os.kill(os.getpid(), signal.SIGTERM))):
        pass
    assert log == ["book close", "spark stop", "broker stop"]
    assert "SIGTERM during the teardown, ignored" in capsys.readouterr().err


def test_a_signal_whose_exception_became_another_still_exits_with_the_signal() -> None:
    log: list[str] = []
    with pytest.raises(SystemExit) as ended, _session(log):
        try:
            os.kill(os.getpid(), signal.SIGTERM)
        finally:
            raise ConnectionError("py4j: the JVM went away")  # noqa: B012 - what a failing finally does
    assert ended.value.code == 128 + signal.SIGTERM
    assert isinstance(ended.value.__cause__, ConnectionError)
    assert log == ["book close", "spark stop", "broker stop"]


def test_off_the_main_thread_no_handler_is_set_and_the_teardown_still_runs() -> None:
    before = signal.getsignal(signal.SIGTERM)
    log: list[str] = []
    seen: list[object] = []

    def run() -> None:
        with _session(log):
            seen.append(signal.getsignal(signal.SIGTERM))

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert seen == [before]
    assert log == ["book close", "spark stop", "broker stop"]


def test_processes_are_found_by_an_exact_environment_entry(tmp_path: Path) -> None:
    for pid, env in {"101": b"HOME=/x\0RABBITMQ_PID_FILE=/tmp/b1/rabbit.pid\0",
                     "102": b"RABBITMQ_PID_FILE=/tmp/b1/rabbit.pid.old\0",
                     "103": b"RABBITMQ_PID_FILE=/tmp/b2/rabbit.pid\0"}.items():
        (tmp_path / pid).mkdir()
        (tmp_path / pid / "environ").write_bytes(env)
    (tmp_path / "self").mkdir()
    (tmp_path / "104").mkdir()  # gone meanwhile: no environ
    assert processes_with_env("RABBITMQ_PID_FILE=/tmp/b1/rabbit.pid", tmp_path) == [101]


def test_a_process_left_running_is_found_and_ended() -> None:
    marker = f"SAFEBUNNY_TEST_MARKER={uuid.uuid4().hex}"
    name, value = marker.split("=")
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env={**os.environ, name: value})
    try:
        assert processes_with_env(marker) == [child.pid]
        end_processes([child.pid], wait_s=10)
        assert child.wait(timeout=5) == -signal.SIGTERM
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
