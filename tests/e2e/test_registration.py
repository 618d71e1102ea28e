"""The installed package makes ``format("safebunny")`` resolvable in a fresh JVM."""

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.xdist_group("drivers")  # tests/xdist_units.py: drivers of their own

# One fresh JVM for both checks: first as installed (Spark's own lookup), then after safebunny.register
SCRIPT = textwrap.dedent(
    """
    from pyspark.sql import SparkSession
    spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
             .config("spark.driver.bindAddress", "127.0.0.1").getOrCreate())

    def check(mode):
        manager = spark._jsparkSession.sessionState().dataSourceManager()
        print(mode, "EXISTS", manager.dataSourceExists("safebunny"), manager.dataSourceExists("nosuchformat"))
        try:
            spark.read.format("safebunny").load()
        except Exception as exc:
            print(mode, "LOAD-ERROR", "DATA_SOURCE_NOT_FOUND" in str(exc), "safebunny" in str(exc))

    check("auto")
    import safebunny
    safebunny.register(spark)
    check("register")
    spark.stop()
    """
)


@pytest.fixture(scope="module")
def fresh_jvm() -> str:
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def test_format_resolves_without_register_in_a_fresh_jvm(fresh_jvm):
    assert "auto EXISTS True False" in fresh_jvm
    # load() reaches safebunny's own code (its error), not Spark's DATA_SOURCE_NOT_FOUND
    assert "auto LOAD-ERROR False True" in fresh_jvm


def test_explicit_register_also_works(fresh_jvm):
    assert "register EXISTS True False" in fresh_jvm
    assert "register LOAD-ERROR False True" in fresh_jvm
