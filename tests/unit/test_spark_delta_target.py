"""The Spark Delta target against a recording stand-in for a session (no Delta on this machine): which writer
options, session confs, statements and views each call uses."""

from __future__ import annotations

import pyarrow as pa
import pytest

from safebunny.delta.spark_delta import TXN_APP_CONF, USER_METADATA_CONF, SparkDeltaTarget, commit_tag
from safebunny.delta.target import delta_target
from safebunny.errors import SafeBunnyError, SafeBunnyOptionError


class _Frame:
    def __init__(self, spark, rows=None):
        self.spark, self.rows = spark, rows

    def createOrReplaceTempView(self, name):  # noqa: N802 - Spark's name
        self.spark.log.append(("view", name))

    @property
    def write(self):
        return _Writer(self.spark)

    def select(self, *_):
        return self

    def collect(self):
        return self.rows or []

    def toArrow(self):  # noqa: N802 - Spark's name
        return pa.table({"x": [1]})


class _Writer:
    def __init__(self, spark):
        self.spark, self.calls = spark, []

    def __getattr__(self, name):
        def call(*args):
            self.calls.append((name, *args))
            if name in ("save", "saveAsTable"):
                self.spark.log.append(("write", tuple(self.calls)))
            return self
        return call


class _Session:
    def __init__(self, exists=True, extensions="io.delta.sql.DeltaSparkSessionExtension", history=()):
        self.log, self.confs, self._exists, self.history = [], {}, exists, history
        self.conf = self
        self.catalog = self

    def get(self, key, default=None):
        return {"spark.sql.extensions": self.extensions}.get(key, default)

    def set(self, key, value):
        self.confs[key] = value

    def unset(self, key):
        self.confs.pop(key)

    def tableExists(self, _):  # noqa: N802 - Spark's name
        return self._exists

    def dropTempView(self, name):  # noqa: N802 - Spark's name
        self.log.append(("drop", name))

    def createDataFrame(self, table):  # noqa: N802 - Spark's name
        return _Frame(self)

    def sql(self, statement, args=None):
        self.log.append(("sql", statement.split(" (")[0], dict(self.confs)))
        if statement.startswith("DESCRIBE HISTORY") and isinstance(self.history, Exception):
            raise self.history
        return _Frame(self, [(h,) for h in self.history] if not isinstance(self.history, Exception) else None)


def _session(**kw):
    spark = _Session(**kw)
    spark.extensions = kw.get("extensions", "io.delta.sql.DeltaSparkSessionExtension")
    return spark


DATA = pa.table({"messageId": ["m1", "m2"], "k": ["a", "a"]})


def test_a_name_resolves_to_spark_delta_and_a_path_to_delta_rs(tmp_path):
    assert delta_target("main.sb.orders").backend == "spark" and not delta_target("main.sb.orders").fenceable
    assert delta_target(str(tmp_path / "t")).backend == "delta-rs" and delta_target(str(tmp_path / "t")).fenceable
    assert delta_target(str(tmp_path / "t"), backend="spark").backend == "spark"


def test_an_append_carries_its_app_transaction_and_tag():
    spark = _session()
    SparkDeltaTarget("main.sb.orders", spark).append(DATA, "app", 7)
    (_, calls), = [e for e in spark.log if e[0] == "write"]
    assert ("option", "txnAppId", "app") in calls and ("option", "txnVersion", "7") in calls
    assert ("option", "userMetadata", commit_tag("app", 7)) in calls and calls[-1] == ("saveAsTable", "main.sb.orders")


def test_an_inbox_by_path_is_saved_by_path_with_its_partitions():
    spark = _session()
    SparkDeltaTarget("/data/inbox", spark).append(DATA, "inbox.app", 3, ("node", "processedDate"))
    (_, calls), = [e for e in spark.log if e[0] == "write"]
    assert ("partitionBy", "node", "processedDate") in calls and calls[-1] == ("save", "/data/inbox")


def test_a_merge_sets_its_transaction_confs_for_the_one_statement_and_drops_its_views():
    spark = _session()
    SparkDeltaTarget("main.sb.orders", spark, checked=True).merge(DATA, ["k"], "app", 5)
    merges = [e for e in spark.log if e[0] == "sql" and e[1].startswith("MERGE INTO `main`.`sb`.`orders`")]
    assert len(merges) == 1 and merges[0][2][TXN_APP_CONF] == "app"
    assert merges[0][2][USER_METADATA_CONF] == commit_tag("app", 5)
    assert spark.confs == {}, "the session-wide confs are cleared after the statement"
    assert any(e[0] == "sql" and e[1].startswith("SELECT `messageId`, `k` FROM") for e in spark.log)
    assert [e[1].endswith("_all") for e in spark.log if e[0] == "drop"] == [True, False]


def test_a_merge_into_a_missing_table_appends_the_last_row_per_key():
    spark = _session(exists=False)
    SparkDeltaTarget("main.sb.orders", spark).merge(DATA, ["k"], "app", 5)
    (_, calls), = [e for e in spark.log if e[0] == "write"]
    assert ("option", "txnVersion", "5") in calls
    assert not [e for e in spark.log if e[0] == "sql" and e[1].startswith("MERGE")]


def test_an_effect_by_name_needs_delta_in_the_session():
    spark = _session(extensions="")
    with pytest.raises(SafeBunnyOptionError, match="needs Delta in the Spark session"):
        SparkDeltaTarget("main.sb.orders", spark, "The effect table", checked=True).append(DATA, "app", 1)
    SparkDeltaTarget("main.sb.inbox", spark, "The inbox").append(DATA, "app", 1)  # the inbox does not check


def test_versions_come_from_the_history_and_an_unreadable_history_is_an_error():
    target = SparkDeltaTarget("main.sb.orders", _session(history=[None, commit_tag("a", 3)]))
    assert target.versions({"a": 3, "b": 1}) == {"a": 3, "b": None}
    assert target.versions({"a": 4}) == {"a": None}
    assert SparkDeltaTarget("t", _session(exists=False)).versions({"a": 0}) == {"a": None}
    with pytest.raises(SafeBunnyError, match="Could not read the history"):
        SparkDeltaTarget("t", _session(history=RuntimeError("denied"))).versions({"a": 0})


def test_maintenance_deletes_compacts_and_vacuums_only_an_existing_table():
    spark = _session()
    target = SparkDeltaTarget("main.sb.inbox", spark)
    assert target.delete_before("billing", "processedDate", "2026-01-01") is None
    assert target.compact(vacuum=False) == {"compacted": None, "vacuumed": None, "swept": 0}
    assert [e[1].split(" ")[0] for e in spark.log if e[0] == "sql"] == ["DELETE", "OPTIMIZE"]
    missing = SparkDeltaTarget("main.sb.inbox", _session(exists=False))
    assert missing.delete_before("billing", "processedDate", "2026-01-01") == 0
    assert missing.compact() == {"compacted": 0, "vacuumed": 0, "swept": 0}
