"""The installed package makes ``format("safebunny")`` resolvable in a fresh JVM."""

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import sys
    from pyspark.sql import SparkSession
    spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
             .config("spark.driver.bindAddress", "127.0.0.1").getOrCreate())
    if sys.argv[1] == "register":
        import safebunny
        safebunny.register(spark)
    manager = spark._jsparkSession.sessionState().dataSourceManager()
    print("EXISTS", manager.dataSourceExists("safebunny"), manager.dataSourceExists("nosuchformat"))
    try:
        spark.read.format("safebunny").load()
    except Exception as exc:
        print("LOAD-ERROR", "DATA_SOURCE_NOT_FOUND" in str(exc), "safebunny" in str(exc))
    spark.stop()
    """
)


def _run(mode: str) -> str:
    out = subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def test_format_resolves_without_register_in_a_fresh_jvm():
    out = _run("auto")
    assert "EXISTS True False" in out
    # load() reaches safebunny's own code (its error), not Spark's DATA_SOURCE_NOT_FOUND
    assert "LOAD-ERROR False True" in out


def test_explicit_register_also_works():
    out = _run("register")
    assert "EXISTS True False" in out
    assert "LOAD-ERROR False True" in out
