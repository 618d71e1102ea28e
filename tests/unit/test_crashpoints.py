import os
import signal
import subprocess
import sys
import textwrap
import time

from safebunny.crashpoints import crash_point


def test_unset_crash_point_does_nothing(monkeypatch):
    monkeypatch.delenv("SAFEBUNNY_CRASH_AT", raising=False)
    crash_point("anything")


def test_named_crash_point_kills_its_process_group_on_the_nth_pass():
    script = textwrap.dedent(
        """
        from safebunny.crashpoints import crash_point
        crash_point("p")
        print("passed once", flush=True)
        crash_point("p")
        print("never", flush=True)
        """
    )
    env = dict(os.environ, SAFEBUNNY_CRASH_AT="p:2")
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                         start_new_session=True, timeout=60)
    assert out.returncode == -signal.SIGKILL
    assert "passed once" in out.stdout and "never" not in out.stdout


def test_a_failing_crash_point_raises_once_on_the_nth_pass(monkeypatch):
    import pytest

    from safebunny.crashpoints import CrashPointFailure

    monkeypatch.setenv("SAFEBUNNY_FAIL_AT", "unit.fail:2")
    crash_point("unit.fail")  # the first pass goes on
    with pytest.raises(CrashPointFailure, match="unit.fail"):
        crash_point("unit.fail")
    crash_point("unit.fail")  # once only: the replay of the failed batch goes through


def test_a_stall_point_blocks_on_the_nth_pass_until_released_and_says_so(tmp_path):
    script = textwrap.dedent(
        """
        from safebunny.crashpoints import crash_point
        crash_point("p")
        print("first pass", flush=True)
        crash_point("p")
        print("released", flush=True)
        crash_point("p")  # once only
        print("third pass", flush=True)
        """
    )
    env = dict(os.environ, SAFEBUNNY_STALL_AT="p:2", SAFEBUNNY_STALL_DIR=str(tmp_path))
    proc = subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "first pass\n"
        deadline = time.monotonic() + 30
        while not (tmp_path / "stalled").exists():
            assert time.monotonic() < deadline, "the process never reported its stall"
            time.sleep(0.05)
        assert (tmp_path / "stalled").read_text().startswith(f"p {proc.pid}")
        time.sleep(0.3)
        assert proc.poll() is None, "it waits for the release"
        (tmp_path / "release").touch()
        assert proc.communicate(timeout=30)[0] == "released\nthird pass\n"
    finally:
        proc.kill()
