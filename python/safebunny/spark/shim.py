"""The JVM shim that gives Spark SQL safebunny's deterministic ids as functions, built and attached on demand.

``safebunny_message_id(causation_id, node, type, index)`` and ``safebunny_correlation_id(business_key)``,
the rule of :mod:`safebunny.ids` in Scala (``safebunny/scala/*.scala``). :func:`jar_path` builds and caches
the jar, :func:`register` attaches it; usage, nulls and the build: docs/sql-shim.md.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from safebunny.errors import SafeBunnyError
from safebunny.ids import correlation_id_for, message_id

__all__ = ["jar_path", "spark_conf", "register", "scala_sources", "cache_dir", "self_test"]

MESSAGE_ID_FUNCTION = "safebunny_message_id"
CORRELATION_ID_FUNCTION = "safebunny_correlation_id"
ENTRY_CLASS = "safebunny.spark.Registrar"
"""A class with a no-argument constructor whose ``accept(SparkSession)`` registers both functions."""
SELF_TEST_CLASS = "safebunny.spark.SelfTest"
MESSAGE_ID_UDF_CLASS = "safebunny.spark.MessageIdUDF"
CORRELATION_ID_UDF_CLASS = "safebunny.spark.CorrelationIdUDF"

_SOURCES_ENV = "SAFEBUNNY_SCALA_SOURCES"
_CACHE_ENV = "SAFEBUNNY_CACHE_DIR"
_JAR_ENV = "SAFEBUNNY_SHIM_JAR"
_PACKAGED_SOURCES = Path(__file__).resolve().parent.parent / "scala"
_REPO_SOURCES = Path("python", "safebunny", "scala")
_LOCK_TIMEOUT_S = 600.0
_JAR_PREFIX = "safebunny-shim_2.13-"


def _installed_from() -> Path | None:
    """The local directory pip installed safebunny from (``direct_url.json``), if any."""
    try:
        from importlib.metadata import distribution

        text = distribution("safebunny").read_text("direct_url.json")
    except Exception:
        return None
    url = json.loads(text).get("url", "") if text else ""
    return Path(unquote(urlsplit(url).path)) if url.startswith("file://") else None


def _source_candidates() -> list[Path]:
    candidates: list[Path] = []
    if os.environ.get(_SOURCES_ENV):
        candidates.append(Path(os.environ[_SOURCES_ENV]))
    candidates.append(_PACKAGED_SOURCES)
    origin = _installed_from()
    if origin is not None:
        candidates.append(origin / _REPO_SOURCES)
    cwd = Path.cwd().resolve()
    candidates.extend(parent / _REPO_SOURCES for parent in (cwd, *cwd.parents))
    return candidates


def scala_sources() -> list[Path]:
    """The Scala source files of the shim, sorted by name, from the first of :func:`_source_candidates` that
    holds them (the order: docs/sql-shim.md)."""
    candidates = _source_candidates()
    for directory in candidates:
        if directory.is_dir() and any(directory.glob("*.scala")):
            return sorted(directory.glob("*.scala"))
    searched = ", ".join(f"'{c}'" for c in candidates[:4])
    raise SafeBunnyError(
        f"safebunny: the Scala sources of the JVM shim were not found (searched {searched} and the "
        f"current directory's parents); install a safebunny wheel that ships safebunny/scala/*.scala, "
        f"or set {_SOURCES_ENV} to the folder holding them (python/safebunny/scala in a checkout)"
    )


def cache_dir() -> Path:
    """Where built jars are kept: ``$SAFEBUNNY_CACHE_DIR``, else ``$XDG_CACHE_HOME/safebunny``,
    else ``~/.cache/safebunny``."""
    if os.environ.get(_CACHE_ENV):
        return Path(os.environ[_CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "safebunny"


def _pyspark_jars() -> tuple[Path, str]:
    try:
        import pyspark
    except ImportError as exc:
        raise SafeBunnyError(
            "safebunny: building the JVM shim needs pyspark (its jars/ folder holds the Scala compiler "
            f"and Spark); install pyspark[sql]>=4.3 first ({exc})"
        )
    jars = Path(pyspark.__file__).resolve().parent / "jars"
    if not jars.is_dir() and os.environ.get("SPARK_HOME"):
        jars = Path(os.environ["SPARK_HOME"]) / "jars"
    if not jars.is_dir():
        raise SafeBunnyError(
            f"safebunny: no Spark jars folder at '{jars}' (pyspark's jars/, else $SPARK_HOME/jars); use a full "
            "pyspark install (not pyspark-client), or build the jar with `tools/sbt package` in a checkout "
            f"and set {_JAR_ENV} to it"
        )
    return jars, pyspark.__version__


def _one(jars: Path, pattern: str) -> Path:
    found = sorted(jars.glob(pattern))
    if not found:
        raise SafeBunnyError(
            f"safebunny: no '{pattern}' in '{jars}'; this pyspark does not ship the Scala 2.13 toolchain "
            f"the offline build needs; build the jar with `tools/sbt package` in a checkout and set {_JAR_ENV} to it"
        )
    return found[-1]


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if found is None:
        raise SafeBunnyError(
            "safebunny: 'java' was not found (JAVA_HOME is unset or has no bin/java, and java is not "
            "on PATH); install Java 17 or 21, the same one Spark uses"
        )
    return found


def _source_key(sources: Sequence[Path], pyspark_version: str, compiler: Path) -> str:
    digest = hashlib.sha256()
    for source in sources:
        digest.update(source.name.encode() + b"\0" + source.read_bytes() + b"\0")
    digest.update(f"pyspark={pyspark_version};compiler={compiler.name}".encode())
    return digest.hexdigest()[:16]


def _run(cmd: list[str], what: str, timeout: float) -> str:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise SafeBunnyError(f"safebunny: {what} did not finish within {timeout:.0f} s; retry on a less busy machine")
    if done.returncode != 0:
        tail = (done.stderr or done.stdout)[-4000:]
        raise SafeBunnyError(f"safebunny: {what} failed (exit {done.returncode}):\n{tail}")
    return done.stdout


def _vectors_tsv(vectors_json: Path, out: Path) -> Path:
    data = json.loads(vectors_json.read_text(encoding="utf-8"))
    lines = [
        "\t".join(["msg", v["causation_id"], v["node"], v["message_type"], str(v["index"]), v["expected"]])
        for v in data["message_ids"]
    ]
    lines += ["\t".join(["corr", v["business_key"], v["expected"]]) for v in data["correlation_ids"]]
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return out


def build_jar(out: Path | str, sources: Sequence[Path] | None = None, vectors: Path | str | None = None,
              timeout: float = 600.0) -> Path:
    """Compile the shim offline with the Scala compiler in pyspark's ``jars/`` (docs/sql-shim.md) into the jar
    ``out`` and run ``safebunny.spark.SelfTest`` on it (built-in vectors, plus every vector of ``vectors`` when
    given); returns ``out``. The jar is written to a temporary name and renamed, so a reader never sees half a jar.
    """
    out = Path(out)
    sources = list(sources) if sources is not None else scala_sources()
    jars, _ = _pyspark_jars()
    java = _java()
    toolchain = [_one(jars, "scala-compiler-2.13.*.jar"), _one(jars, "scala-library-2.13.*.jar"),
                 _one(jars, "scala-reflect-2.13.*.jar")]
    classpath = os.pathsep.join(str(j) for j in sorted(jars.glob("*.jar")))
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="safebunny-shim-", dir=out.parent) as tmp:
        classes = Path(tmp, "classes")
        classes.mkdir()
        _run([java, "-Xss8m", "-cp", os.pathsep.join(map(str, toolchain)), "scala.tools.nsc.Main",
              "-usejavacp:false", "-classpath", classpath, "-d", str(classes), "-release", "17",
              "-deprecation", "-feature", *map(str, sources)],
             "compiling the Scala shim", timeout)
        self_test(classes, vectors, timeout)
        partial = Path(tmp, out.name)
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as jar:
            jar.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\r\nCreated-By: safebunny.shim\r\n\r\n")
            for path in sorted(classes.rglob("*.class")):
                jar.write(path, path.relative_to(classes).as_posix())
        os.replace(partial, out)
    return out


def self_test(jar: Path | str, vectors: Path | str | None = None, timeout: float = 600.0) -> int:
    """Run ``safebunny.spark.SelfTest`` from ``jar`` (a jar or a classes folder, however it was built: offline,
    ``sbt package``) on its built-in vectors plus every vector of ``vectors`` (``tests/vectors/message_ids.json``),
    with the Scala library of pyspark's ``jars/``; returns how many vectors passed, raises on any mismatch."""
    jars, _ = _pyspark_jars()
    classpath = os.pathsep.join([str(jar), str(_one(jars, "scala-library-2.13.*.jar"))])
    with tempfile.TemporaryDirectory(prefix="safebunny-selftest-") as tmp:
        test_args = [str(_vectors_tsv(Path(vectors), Path(tmp, "vectors.tsv")))] if vectors else []
        stdout = _run([_java(), "-cp", classpath, SELF_TEST_CLASS, *test_args], "the shim's self-test", timeout)
    verdict = [line.split() for line in stdout.splitlines() if line.startswith("SELFTEST OK ")]
    if not verdict:
        raise SafeBunnyError(f"safebunny: the shim's self-test printed no verdict: {stdout[-2000:]!r}")
    return int(verdict[-1][2])


@contextmanager
def _file_lock(path: Path, timeout: float) -> Iterator[None]:
    try:
        import fcntl
    except ImportError:  # Windows: no lock; the rename in build_jar keeps the jar whole anyway
        yield
        return
    with open(path, "a+") as handle:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise SafeBunnyError(
                        f"safebunny: another process held the shim build lock '{path}' for over {timeout:.0f} s; "
                        "if no build is running, delete that file and retry"
                    )
                time.sleep(0.2)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def jar_path(rebuild: bool = False) -> str:
    """The path of the shim jar for this pyspark: ``$SAFEBUNNY_SHIM_JAR`` when set (a jar built elsewhere, such
    as ``tools/sbt package``'s, used as it is), else the offline build in :func:`cache_dir`, built if missing
    (named by a hash of the sources and the pyspark version: docs/sql-shim.md); ``rebuild`` forces a new
    offline build and ignores ``$SAFEBUNNY_SHIM_JAR``."""
    given = os.environ.get(_JAR_ENV)
    if given and not rebuild:
        if not Path(given).is_file():
            raise SafeBunnyError(
                f"safebunny: {_JAR_ENV} is '{given}', which is not a file; build the jar there "
                f"(`make shim-jar` in a checkout) or unset {_JAR_ENV} to use the offline build"
            )
        return str(Path(given).resolve())
    sources = scala_sources()
    jars, version = _pyspark_jars()
    key = _source_key(sources, version, _one(jars, "scala-compiler-2.13.*.jar"))
    target = cache_dir() / f"{_JAR_PREFIX}{key}.jar"
    if target.is_file() and not rebuild:
        return str(target)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SafeBunnyError(
            f"safebunny: cannot create the shim's cache folder '{target.parent}' ({exc}); set "
            f"{_CACHE_ENV} to a writable folder"
        )
    with _file_lock(target.parent / f".{target.stem}.lock", _LOCK_TIMEOUT_S):
        if rebuild or not target.is_file():
            build_jar(target, sources)
    return str(target)


def spark_conf() -> dict[str, str]:
    """Session settings that put the shim on the driver and executor class paths at start.

    ``SparkSession.builder.config(map=safebunny.spark.shim.spark_conf())`` (merge with your own
    ``spark.jars`` if you set one); then :func:`register` only registers the functions.
    """
    return {"spark.jars": jar_path()}


def _load_entry(spark: Any) -> Any:
    """An instance of :data:`ENTRY_CLASS` loaded through the session's jar class loader, or None."""
    jvm = spark._jvm
    gateway = spark.sparkContext._gateway
    loader = spark._jsparkSession.sharedState().jarClassLoader()
    try:
        cls = jvm.java.lang.Class.forName(ENTRY_CLASS, True, loader)
    except Exception as exc:  # py4j wraps ClassNotFoundException
        if "ClassNotFoundException" in str(exc):
            return None
        raise
    ctor = cls.getDeclaredConstructor(gateway.new_array(jvm.java.lang.Class, 0))
    return ctor.newInstance(gateway.new_array(jvm.java.lang.Object, 0))


def register(spark: Any, jar: str | None = None, implementation: str = "auto") -> str:
    """Register ``safebunny_message_id`` and ``safebunny_correlation_id`` in ``spark``; returns which
    implementation serves them: ``"jar"`` (the Scala shim, JVM speed) or ``"python"`` (Python UDFs over
    :mod:`safebunny.ids`, the same ids, a Python worker per task).

    On a classic session the jar (``jar``, else :func:`jar_path`) is added with ``ADD JAR`` unless its classes
    are loadable already; over Spark Connect it is uploaded with ``addArtifacts``, and where that is refused or
    no jar can be built the functions are Python UDFs, with a warning (docs/databricks.md, docs/sql-shim.md).
    ``implementation="python"`` or ``"jar"`` chooses (``"jar"`` fails instead of falling back). The functions
    are temporary: register once per session. Calling it again is harmless.
    """
    if implementation not in ("auto", "jar", "python"):
        raise SafeBunnyError(f"safebunny: implementation must be 'auto', 'jar' or 'python', not {implementation!r}")
    if implementation == "python":
        _register_python(spark)
        return "python"
    if not hasattr(spark, "_jsparkSession"):
        try:
            _register_connect(spark, jar)
            return "jar"
        except Exception as exc:
            if implementation == "jar":
                raise
            logging.getLogger("safebunny.shim").warning(
                "safebunny: the Scala shim could not be registered over Spark Connect (%s); "
                "safebunny_message_id and safebunny_correlation_id are Python UDFs in this session instead "
                "(the same ids, slower)", str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__)
            _register_python(spark)
            return "python"
    entry = _load_entry(spark)
    if entry is None:
        path = jar or jar_path()
        spark.sql("ADD JAR " + _sql_string(path))
        entry = _load_entry(spark)
        if entry is None:
            raise SafeBunnyError(
                f"safebunny: '{ENTRY_CLASS}' is still not loadable after ADD JAR '{path}'; start the session "
                "with .config('spark.jars', safebunny.spark.shim.jar_path()) instead"
            )
    entry.accept(spark._jsparkSession)
    return "jar"


def _register_connect(spark: Any, jar: str | None) -> None:
    spark.addArtifacts(jar or jar_path())
    spark.udf.registerJavaFunction(MESSAGE_ID_FUNCTION, MESSAGE_ID_UDF_CLASS, "string")
    spark.udf.registerJavaFunction(CORRELATION_ID_FUNCTION, CORRELATION_ID_UDF_CLASS, "string")
    # the registration is lazy: fail here, not in the user's first query, when the class is not there
    spark.sql(f"SELECT {CORRELATION_ID_FUNCTION}('probe') AS id").collect()


def _python_message_id(causation_id: Any, node: Any, message_type: Any, index: Any) -> Any:
    if causation_id is None or node is None or message_type is None or index is None:
        return None
    return message_id(causation_id, node, message_type, int(index))


def _python_correlation_id(business_key: Any) -> Any:
    return None if business_key is None else correlation_id_for(business_key)


def _register_python(spark: Any) -> None:
    """The two functions as Python UDFs (a null argument gives null; a bad one fails the query)."""
    spark.udf.register(MESSAGE_ID_FUNCTION, _python_message_id, "string")
    spark.udf.register(CORRELATION_ID_FUNCTION, _python_correlation_id, "string")


def _sql_string(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


if __name__ == "__main__":  # python -m safebunny.spark.shim : build (if needed) and print the jar's path
    print(jar_path(rebuild="--rebuild" in sys.argv[1:]))
