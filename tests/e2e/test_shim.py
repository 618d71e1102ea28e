"""The JVM shim: the same ids as ``safebunny.ids``, as Spark SQL functions, attached to a live session.

The shared ``spark`` fixture was started without the jar, so these tests also prove that
``safebunny.spark.shim.register(spark)`` works on a running session; one test starts its own session
with ``spark.jars`` (the other documented way), and two build the jar from scratch (the offline
build with the full vectors, and concurrent first builds sharing one cache).

The jar under test is ``safebunny.spark.shim.jar_path()``'s: the offline build under ``make test``, the jar of
``tools/sbt package`` under ``make shim-jar`` (``SAFEBUNNY_SHIM_JAR``, which skips the offline-build tests);
``test_the_functions_are_served_from_the_jar_under_test`` checks that the classes come from it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from safebunny.ids import correlation_id_for, message_id
from safebunny.spark import shim

REPO = Path(__file__).resolve().parents[2]
VECTORS = json.loads((REPO / "tests" / "vectors" / "message_ids.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def sql(spark):  # type: ignore[no-untyped-def]
    """The shared session with the shim registered on it (live, no restart)."""
    shim.register(spark)
    shim.register(spark)  # a second call is harmless
    return spark


def _served_from(spark, loader) -> Path:  # type: ignore[no-untyped-def]
    """The file the shim's entry class was loaded from, through ``loader``."""
    cls = spark._jvm.java.lang.Class.forName(shim.ENTRY_CLASS, True, loader)
    location = cls.getProtectionDomain().getCodeSource().getLocation().toString()
    return Path(unquote(urlsplit(location).path)).resolve()


def test_the_functions_are_served_from_the_jar_under_test(sql):  # type: ignore[no-untyped-def]
    loader = sql._jsparkSession.sharedState().jarClassLoader()
    assert _served_from(sql, loader) == Path(shim.jar_path()).resolve()
    if os.environ.get("SAFEBUNNY_SHIM_JAR"):
        assert _served_from(sql, loader) == Path(os.environ["SAFEBUNNY_SHIM_JAR"]).resolve()


def test_message_ids_match_the_vectors_byte_for_byte(sql):  # type: ignore[no-untyped-def]
    rows = [(v["causation_id"], v["node"], v["message_type"], v["index"], v["expected"])
            for v in VECTORS["message_ids"]]
    df = sql.createDataFrame(rows, "c string, n string, t string, i bigint, expected string")
    got = df.selectExpr("expected", "safebunny_message_id(c, n, t, i) AS got").collect()
    assert len(got) == len(rows) == 13
    assert [r.got for r in got] == [r.expected for r in got]


def test_correlation_ids_match_the_vectors_byte_for_byte(sql):  # type: ignore[no-untyped-def]
    rows = [(v["business_key"], v["expected"]) for v in VECTORS["correlation_ids"]]
    df = sql.createDataFrame(rows, "k string, expected string")
    got = df.selectExpr("expected", "safebunny_correlation_id(k) AS got").collect()
    assert [r.got for r in got] == [r.expected for r in got] and len(got) == 6


def test_sql_literals_casts_and_nulls(sql):  # type: ignore[no-untyped-def]
    row = sql.sql(
        """SELECT safebunny_message_id('order-1', 'billing', 'InvoiceRequested', 0) AS int_index,
                  safebunny_message_id('order-1', 'billing', 'InvoiceRequested', CAST(1 AS BIGINT)) AS long_index,
                  safebunny_message_id('order-1', 'billing', 'InvoiceRequested', '1') AS string_index,
                  safebunny_message_id(NULL, 'billing', 'InvoiceRequested', 0) AS null_cause,
                  safebunny_message_id('order-1', NULL, 'InvoiceRequested', 0) AS null_node,
                  safebunny_message_id('order-1', 'billing', NULL, 0) AS null_type,
                  safebunny_message_id('order-1', 'billing', 'InvoiceRequested', NULL) AS null_index,
                  safebunny_correlation_id('order-1') AS corr,
                  safebunny_correlation_id(NULL) AS null_key"""
    ).first()
    assert row.int_index == message_id("order-1", "billing", "InvoiceRequested", 0)
    assert row.long_index == row.string_index == message_id("order-1", "billing", "InvoiceRequested", 1)
    assert row.null_cause is row.null_node is row.null_type is row.null_index is row.null_key is None
    assert row.corr == correlation_id_for("order-1")


def test_java_udf_classes_for_registerjavafunction_and_spark_connect(sql):  # type: ignore[no-untyped-def]
    """The classes ``register`` uses over Spark Connect get no argument casts: check their own conversions."""
    sql.udf.registerJavaFunction("sbt_java_message_id", shim.MESSAGE_ID_UDF_CLASS, "string")
    sql.udf.registerJavaFunction("sbt_java_correlation_id", shim.CORRELATION_ID_UDF_CLASS, "string")
    row = sql.sql(
        """SELECT sbt_java_message_id('order-1', 'billing', 'InvoiceRequested', 1) AS int_index,
                  sbt_java_message_id('order-1', 'billing', 'InvoiceRequested', CAST(1 AS BIGINT)) AS long_index,
                  sbt_java_message_id('order-1', 'billing', 'InvoiceRequested', CAST(1 AS SMALLINT)) AS short_index,
                  sbt_java_message_id('order-1', 'billing', 'InvoiceRequested', CAST(1 AS DECIMAL(10, 0))) AS dec,
                  sbt_java_message_id('order-1', 'billing', 'InvoiceRequested', '1') AS string_index,
                  sbt_java_message_id('order-1', 'billing', 'InvoiceRequested', NULL) AS null_index,
                  sbt_java_correlation_id('order-1') AS corr"""
    ).first()
    expected = message_id("order-1", "billing", "InvoiceRequested", 1)
    assert row.int_index == row.long_index == row.short_index == row.dec == row.string_index == expected
    assert row.null_index is None and row.corr == correlation_id_for("order-1")
    with pytest.raises(Exception, match="cast it to BIGINT"):
        sql.sql("SELECT sbt_java_message_id('c', 'n', 't', 1.5D) AS x").collect()


@pytest.mark.parametrize(
    "expr, words",
    [
        ("safebunny_message_id('', 'billing', 'T', 0)", ["causation_id", "non-empty"]),
        ("safebunny_message_id('c', '', 'T', 0)", ["'node'", "non-empty"]),
        ("safebunny_message_id('c', 'n', 'T', -1)", ["'index'", ">= 0", "-1"]),
        ("safebunny_correlation_id('')", ["business_key", "non-empty"]),
    ],
)
def test_invalid_arguments_fail_the_query_naming_the_argument(sql, expr, words):  # type: ignore[no-untyped-def]
    with pytest.raises(Exception) as info:
        sql.sql(f"SELECT {expr} AS x").collect()
    message = str(info.value)
    assert all(w in message for w in words), message[-2000:]


_field = st.text(min_size=1, max_size=40)
_alphabetish = st.text(alphabet="ab|:1 é🐇", min_size=1, max_size=8)  # the encoding's own separators


def _collect(strategy: st.SearchStrategy, n: int) -> list:
    """Draw ``n`` hypothesis examples cheaply in Python, so that Spark runs one job for all of them."""
    out: list = []

    @settings(max_examples=n, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(strategy)
    def draw(example: object) -> None:
        out.append(example)

    draw()
    return out


def test_message_ids_match_python_on_random_inputs(sql):  # type: ignore[no-untyped-def]
    rows = _collect(st.tuples(st.one_of(_field, _alphabetish), st.one_of(_field, _alphabetish),
                              st.one_of(_field, _alphabetish), st.integers(0, 2**63 - 1)), 400)
    assert len(rows) >= 300
    df = sql.createDataFrame(rows, "c string, n string, t string, i bigint").repartition(3)
    got = df.selectExpr("c", "n", "t", "i", "safebunny_message_id(c, n, t, i) AS id").collect()
    assert len(got) == len(rows)
    wrong = [(r.c, r.n, r.t, r.i, r.id) for r in got if r.id != message_id(r.c, r.n, r.t, r.i)]
    assert wrong == []


def test_correlation_ids_match_python_on_random_inputs(sql):  # type: ignore[no-untyped-def]
    keys = _collect(st.one_of(_field, _alphabetish, st.text(min_size=1, max_size=500)), 300)
    got = sql.createDataFrame([(k,) for k in keys], "k string").selectExpr("k", "safebunny_correlation_id(k) AS id")
    wrong = [(r.k, r.id) for r in got.collect() if r.id != correlation_id_for(r.k)]
    assert wrong == []


_FRESH_SESSION = textwrap.dedent(
    """
    import safebunny.spark.shim
    from pyspark.sql import SparkSession
    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.driver.bindAddress", "127.0.0.1").config(map=safebunny.spark.shim.spark_conf())
             .getOrCreate())
    loadable = safebunny.spark.shim._load_entry(spark) is not None  # on the class path from the start
    safebunny.spark.shim.register(spark)
    row = spark.sql("SELECT safebunny_message_id('order-1', 'billing', 'InvoiceRequested', 0) AS m").first()
    cls = spark._jvm.java.lang.Class.forName(safebunny.spark.shim.ENTRY_CLASS, True,
                                             spark._jsparkSession.sharedState().jarClassLoader())
    print("FROM", cls.getProtectionDomain().getCodeSource().getLocation().toString())
    print("RESULT", loadable, row.m)
    spark.stop()
    """
)


def test_a_session_started_with_spark_conf_needs_no_add_jar():
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
    out = subprocess.run([sys.executable, "-c", _FRESH_SESSION], capture_output=True, text=True, timeout=300,
                         env=env, cwd=REPO)
    assert out.returncode == 0, out.stderr[-3000:]
    expected = message_id("order-1", "billing", "InvoiceRequested", 0)
    assert f"RESULT True {expected}" in out.stdout, out.stdout[-2000:] + out.stderr[-2000:]
    served = [line.split(" ", 1)[1] for line in out.stdout.splitlines() if line.startswith("FROM ")]
    assert [Path(unquote(urlsplit(u).path)).resolve() for u in served] == [Path(shim.jar_path()).resolve()]


@pytest.fixture(scope="module")
def offline_jar(tmp_path_factory):  # type: ignore[no-untyped-def]
    """The jar as CI builds it: ``scala_shim/build_offline.py`` with every vector self-tested."""
    jar = tmp_path_factory.mktemp("offline") / "shim.jar"
    out = subprocess.run([sys.executable, str(REPO / "scala_shim" / "build_offline.py"), "--out", str(jar)],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "self-test passed" in out.stdout
    return jar


def test_offline_build_script_self_tests_every_vector(offline_jar):  # type: ignore[no-untyped-def]
    names = set(zipfile.ZipFile(offline_jar).namelist())
    assert {"safebunny/spark/Ids.class", "safebunny/spark/Registrar.class",
            "safebunny/spark/MessageIdUDF.class", "META-INF/MANIFEST.MF"} <= names


def test_the_self_test_fails_loudly_on_a_wrong_vector(offline_jar, tmp_path):  # type: ignore[no-untyped-def]
    bad = json.loads(json.dumps(VECTORS))
    bad["message_ids"][0]["expected"] = "00000000-0000-5000-8000-000000000000"
    (tmp_path / "bad.json").write_text(json.dumps(bad), encoding="utf-8")
    tsv = shim._vectors_tsv(tmp_path / "bad.json", tmp_path / "bad.tsv")
    jars, _ = shim._pyspark_jars()
    classpath = os.pathsep.join([str(offline_jar), str(shim._one(jars, "scala-library-2.13.*.jar"))])
    out = subprocess.run([shim._java(), "-cp", classpath, shim.SELF_TEST_CLASS, str(tsv)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 1 and "SELFTEST OK" not in out.stdout
    mismatches = [line for line in out.stderr.splitlines() if line.startswith("SELFTEST MISMATCH")]
    assert len(mismatches) == 1 and "order-1 | billing | InvoiceRequested | 0" in mismatches[0], out.stderr


_CONCURRENT_BUILD = textwrap.dedent(
    """
    import sys
    from safebunny.spark import shim
    real = shim.build_jar
    def counting(*args, **kwargs):
        print("BUILT", flush=True)
        return real(*args, **kwargs)
    shim.build_jar = counting
    print("PATH", shim.jar_path())
    """
)


def test_concurrent_first_builds_share_one_build(tmp_path):  # type: ignore[no-untyped-def]
    env = {**os.environ, "SAFEBUNNY_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("SAFEBUNNY_SHIM_JAR", None)  # this test is about the offline build
    procs = [subprocess.Popen([sys.executable, "-c", _CONCURRENT_BUILD], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env, cwd=REPO) for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert all(p.returncode == 0 for p in procs), [e[-2000:] for _, e in outs]
    paths = {line for out, _ in outs for line in out.splitlines() if line.startswith("PATH ")}
    builds = sum(out.count("BUILT") for out, _ in outs)
    assert len(paths) == 1 and builds == 1, outs
    jars = list((tmp_path / "cache").glob("*.jar"))
    assert len(jars) == 1 and zipfile.ZipFile(jars[0]).testzip() is None
    assert not [p for p in (tmp_path / "cache").iterdir() if p.name.startswith("safebunny-shim-")]  # no temp left
