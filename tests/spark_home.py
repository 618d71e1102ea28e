"""A SPARK_HOME for the test run whose Python workers import pyspark from site-packages, not from pyspark.zip.

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` first on every Python worker's path. For a pip-installed pyspark
that zip holds the same sources as site-packages but no bytecode, and Python cannot cache bytecode in a zip: each
worker process (a streaming source's runner, each sink commit, each planning call) compiles every pyspark module it
imports again. Measured on this machine, quiet: ``import pyspark.sql.streaming.python_streaming_source_runner`` takes
1.6-2.3 s from the zip and 0.5-0.65 s from site-packages. On 2 loaded cores the zip's start passes the JVM's fixed
10 s wait for a worker to connect back ("Python worker failed to connect back"), the failure that made whole test
tiers fail at load.

The folder made here links every entry of pyspark's own SPARK_HOME (``bin``, ``jars``, ``sbin``, ...) except
``python``, so the JVM, spark-submit and local-cluster executors are the same, and Spark's worker path names a zip
that is not there (a path entry that does not exist is skipped). Workers then import the same pyspark from
site-packages with their cached bytecode. Tests only: a user's SPARK_HOME is theirs.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def _pyspark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def shadow_spark_home() -> Path:
    """Make (once per venv; every xdist worker may race here) and return the SPARK_HOME without pyspark.zip."""
    real = _pyspark_home()
    home = Path(sys.prefix) / "safebunny-test-spark-home"
    (home / "python" / "lib").mkdir(parents=True, exist_ok=True)
    for entry in real.iterdir():
        if entry.name in ("python", "__pycache__") or entry.suffix in (".py", ".pyi", ".typed"):
            continue
        link = home / entry.name
        if link.is_symlink() and os.readlink(link) == str(entry):
            continue
        try:
            link.unlink(missing_ok=True)
            link.symlink_to(entry)
        except FileExistsError:  # another worker made the same link a moment ago
            pass
    return home


def use_shadow_spark_home() -> None:
    """Point this process and its children at the shadow SPARK_HOME, unless the caller set SPARK_HOME."""
    if "SPARK_HOME" not in os.environ:
        os.environ["SPARK_HOME"] = str(shadow_spark_home())
