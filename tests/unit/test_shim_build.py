"""Pure logic of the shim's build: where sources and jars are looked for, the cache key, errors.

No JVM here; tests/e2e/test_shim.py compiles, self-tests and runs the jar in Spark.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from safebunny.errors import SafeBunnyError
from safebunny.spark import shim

REPO = Path(__file__).resolve().parents[2]


def test_the_checkout_holds_the_canonical_sources():
    names = {p.name for p in (REPO / "python" / "safebunny" / "scala").glob("*.scala")}
    assert {"Ids.scala", "SafeBunnyFunctions.scala", "SelfTest.scala"} <= names


def test_build_sbt_compiles_the_packaged_sources():
    sbt = (REPO / "build.sbt").read_text(encoding="utf-8")
    assert '"python" / "safebunny" / "scala"' in sbt
    assert 'scalaVersion := "2.13' in sbt and '% "provided"' in sbt


def test_sources_env_wins(tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    (tmp_path / "B.scala").write_text("object B", encoding="utf-8")
    (tmp_path / "A.scala").write_text("object A", encoding="utf-8")
    monkeypatch.setenv("SAFEBUNNY_SCALA_SOURCES", str(tmp_path))
    assert [p.name for p in shim.scala_sources()] == ["A.scala", "B.scala"]


def test_sources_are_found_from_a_checkout_when_the_package_has_none(tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    monkeypatch.delenv("SAFEBUNNY_SCALA_SOURCES", raising=False)
    monkeypatch.setattr(shim, "_PACKAGED_SOURCES", tmp_path / "nothing-here")
    monkeypatch.setattr(shim, "_installed_from", lambda: None)
    monkeypatch.chdir(REPO / "tests" / "unit")  # a parent is the checkout
    found = shim.scala_sources()
    assert found and all(p.parent == REPO / "python" / "safebunny" / "scala" for p in found)


def test_missing_sources_say_where_they_looked_and_what_to_do(tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    monkeypatch.delenv("SAFEBUNNY_SCALA_SOURCES", raising=False)
    monkeypatch.setattr(shim, "_PACKAGED_SOURCES", tmp_path / "pkg" / "scala")
    monkeypatch.setattr(shim, "_installed_from", lambda: None)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SafeBunnyError) as info:
        shim.scala_sources()
    message = str(info.value)
    assert str(tmp_path / "pkg" / "scala") in message and "SAFEBUNNY_SCALA_SOURCES" in message


def test_cache_dir_follows_env_then_xdg_then_home(tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("SAFEBUNNY_CACHE_DIR", str(tmp_path / "explicit"))
    assert shim.cache_dir() == tmp_path / "explicit"
    monkeypatch.delenv("SAFEBUNNY_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert shim.cache_dir() == tmp_path / "xdg" / "safebunny"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert shim.cache_dir() == tmp_path / "home" / ".cache" / "safebunny"


def test_cache_key_changes_with_sources_and_pyspark_version(tmp_path):  # type: ignore[no-untyped-def]
    src = tmp_path / "A.scala"
    src.write_text("object A", encoding="utf-8")
    compiler = Path("scala-compiler-2.13.18.jar")
    key = shim._source_key([src], "4.3.0", compiler)
    assert key == shim._source_key([src], "4.3.0", compiler) and len(key) == 16
    assert key != shim._source_key([src], "4.3.1", compiler)
    src.write_text("object A // changed", encoding="utf-8")
    assert key != shim._source_key([src], "4.3.0", compiler)


def test_installed_from_reads_pips_direct_url():
    origin = shim._installed_from()
    # installed with `pip install .` from this checkout (make install); None for a wheel from an index
    assert origin is None or (origin / "setup.py").exists()


def test_sql_string_escapes_quotes_and_backslashes():
    assert shim._sql_string("/a/b'c\\d.jar") == "'/a/b\\'c\\\\d.jar'"


def test_missing_java_is_a_clear_error(monkeypatch):  # type: ignore[no-untyped-def]
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setattr(shim.shutil, "which", lambda name: None)
    with pytest.raises(SafeBunnyError, match="'java' was not found.*install Java 17"):
        shim._java()


def test_an_unwritable_cache_says_which_variable_to_set(tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder", encoding="utf-8")
    monkeypatch.setenv("SAFEBUNNY_CACHE_DIR", str(blocker / "cache"))
    with pytest.raises(SafeBunnyError, match="cannot create the shim's cache folder.*SAFEBUNNY_CACHE_DIR"):
        shim.jar_path()


def test_a_given_jar_is_used_as_it_is(tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    jar = tmp_path / "built-by-sbt.jar"
    jar.write_bytes(b"PK")
    monkeypatch.setenv("SAFEBUNNY_SHIM_JAR", str(jar))
    monkeypatch.setattr(shim, "build_jar", lambda *a, **k: pytest.fail("a given jar must not be rebuilt"))
    assert shim.jar_path() == str(jar.resolve())
    assert shim.spark_conf() == {"spark.jars": str(jar.resolve())}


def test_a_given_jar_that_is_missing_is_a_clear_error(tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("SAFEBUNNY_SHIM_JAR", str(tmp_path / "nope.jar"))
    with pytest.raises(SafeBunnyError, match="SAFEBUNNY_SHIM_JAR is '.*nope.jar', which is not a file.*make shim-jar"):
        shim.jar_path()


def test_tools_sbt_runs_the_launcher_of_build_properties_with_caches_outside_the_checkout():
    script = (REPO / "tools" / "sbt").read_text(encoding="utf-8")
    assert "project/build.properties" in script and "org.scala-sbt:sbt-launch:$version" in script
    assert "dependency:copy" in script  # fetched by Maven, the ordinary client, never committed
    for prop in ("sbt.boot.directory", "sbt.global.base", "sbt.ivy.home", "sbt.coursier.home"):
        assert f"-D{prop}=$cache/" in script
    assert (REPO / "tools" / "sbt").stat().st_mode & 0o111
    version = (REPO / "project" / "build.properties").read_text(encoding="utf-8").split("=", 1)[1].strip()
    assert version.startswith("1.")
