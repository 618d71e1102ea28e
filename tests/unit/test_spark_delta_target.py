"""The Spark Delta target's pure parts: which backend a table gets, and the check that a write by name has Delta in
its session. How it writes and reads (app transactions, tags, merges, history, maintenance) is tested on real Delta
Spark in the Delta Spark tier (tests/delta_spark, ``make test-delta``)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from safebunny.delta.spark_delta import SparkDeltaTarget
from safebunny.delta.target import delta_target
from safebunny.errors import SafeBunnyOptionError


def test_a_name_resolves_to_spark_delta_and_a_path_to_delta_rs(tmp_path):
    assert delta_target("main.sb.orders").backend == "spark" and not delta_target("main.sb.orders").fenceable
    assert delta_target(str(tmp_path / "t")).backend == "delta-rs" and delta_target(str(tmp_path / "t")).fenceable
    assert delta_target(str(tmp_path / "t"), backend="spark").backend == "spark"


class _Conf:
    """A session's confs only: the check reads two of them before anything is written."""

    def __init__(self, confs):
        self.confs = confs
        self.conf = self

    def get(self, key, default=None):
        return self.confs.get(key, default)

    def createDataFrame(self, _):  # noqa: N802 - Spark's name
        raise AssertionError("nothing is written without Delta in the session")


def test_an_effect_by_name_needs_delta_in_the_session():
    data = pa.table({"messageId": ["m1"]})
    with pytest.raises(SafeBunnyOptionError, match="needs Delta in the Spark session"):
        SparkDeltaTarget("main.sb.orders", _Conf({}), "The effect table", checked=True).append(data, "app", 1)
    databricks = _Conf({"spark.databricks.clusterUsageTags.clusterId": "0101"})
    assert SparkDeltaTarget("t", databricks, checked=True).spark(write=True) is databricks
    extension = _Conf({"spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension"})
    assert SparkDeltaTarget("t", extension, checked=True).spark(write=True) is extension
