"""The README's "first saga" runs as written: the code block is extracted from README.md and run in a
fresh Python process, with the environment the README describes (a virtual environment whose ``bin``
is first on ``PATH``, no ``PYSPARK_PYTHON``), against the tests' broker."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.xdist_group("drivers")  # tests/xdist_units.py: drivers of their own

README = Path(__file__).parents[2] / "README.md"
README_URI = "amqp://guest:guest@127.0.0.1:5672/%2F"


def first_saga_code() -> str:
    """The first ```python block after the heading "## A first saga"."""
    text = README.read_text("utf-8")
    section = text.split("\n## A first saga\n", 1)[1]
    match = re.search(r"^```python\n(.*?)^```$", section, re.S | re.M)
    assert match, "README.md: no ```python block under '## A first saga'"
    return match.group(1)


def test_readme_first_saga_is_short_and_complete() -> None:
    code = first_saga_code()
    assert len(code.splitlines()) <= 45
    assert "SparkSession.builder" in code and README_URI in code
    assert len(README.read_text("utf-8").splitlines()) <= 250


def test_readme_first_saga_runs_as_written(amqp_uri: str, tmp_path: Path) -> None:
    code = first_saga_code()
    if amqp_uri != README_URI:  # the tests' broker is elsewhere (SAFEBUNNY_TEST_AMQP_URI, a throwaway broker)
        code = code.replace(README_URI, amqp_uri)
    script = tmp_path / "first_saga.py"
    script.write_text(code, "utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"  # an activated venv
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr[-5000:]
    lines = done.stdout.splitlines()
    assert "['hello ada', 'hello grace']" in lines, done.stdout
    assert "greeter NameGiven processed 2 duplicates 1" in lines, done.stdout
    assert "printer Greeted processed 2 duplicates 0" in lines, done.stdout
