import os
import signal
import subprocess
import sys
import textwrap

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
