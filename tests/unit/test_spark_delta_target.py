"""The Spark Delta target's pure parts: which backend a table gets, and the check that a write by name has Delta in
its session. How it writes and reads (app transactions, tags, merges, history, maintenance) is tested on real Delta
Spark in the Delta Spark tier (tests/delta_spark, ``make test-delta``)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from safebunny.delta.backend import delta_target
from safebunny.delta.spark_delta import SparkDeltaTarget
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


def test_a_history_covers_a_claim_when_nothing_was_cleaned_or_it_starts_well_before():
    import datetime as dt

    from safebunny.delta.commit_tags import CLOCK_SLACK_SECONDS, history_covers

    start = dt.datetime(2026, 11, 1, 12, 0)
    claim = start.timestamp()
    assert history_covers([(0, start, None), (9, start + dt.timedelta(days=9), "t")], claim + 10 * 86400)
    assert not history_covers([(12, start, None)], claim)  # cut, and it starts at the claim: unknown
    assert not history_covers([(12, start, None)], claim + CLOCK_SLACK_SECONDS - 1)
    assert history_covers([(12, start, None), (13, start, None)], claim + CLOCK_SLACK_SECONDS)
