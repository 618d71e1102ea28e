"""The Spark Delta backend's statements as text (they hold names only, never a value), and the backend choice as the
Inbox makes it. The look-ups run on real Delta Spark in tests/delta_spark."""

import pytest

from safebunny.delta.spark_sql import maintenance_sql, table_ref
from safebunny.errors import SafeBunnyOptionError
from safebunny.exactly_once.inbox.table import Inbox


def test_names_are_quoted_and_paths_read_as_delta_paths():
    assert table_ref("main.sb.inbox") == "`main`.`sb`.`inbox`"
    assert table_ref("we`ird") == "`we``ird`"
    assert table_ref("/Volumes/main/sb/inbox") == "delta.`/Volumes/main/sb/inbox`"
    assert table_ref("s3://b/in`box") == "delta.`s3://b/in``box`"


def test_maintenance_statements():
    assert maintenance_sql("`i`") == ["OPTIMIZE `i`", "VACUUM `i`"]


def test_the_backend_follows_the_table_and_can_be_chosen():
    assert Inbox("/tmp/sb/inbox", "billing").backend == "delta-rs"
    assert Inbox("main.sb.inbox", "billing").backend == "spark"
    assert Inbox("/Volumes/main/sb/inbox", "billing", backend="spark").backend == "spark"
    with pytest.raises(SafeBunnyOptionError, match="one of auto, delta-rs, spark; got 'hive'"):
        Inbox("/tmp/sb/inbox", "billing", backend="hive")
