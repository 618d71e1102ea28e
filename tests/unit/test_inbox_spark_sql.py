"""The Spark Delta inbox backend's SQL (no Delta on this machine: the statements are checked as text,
and the backend choice as the Inbox makes it)."""

import pytest

from safebunny.delta.spark_delta import maintenance_sql, table_ref
from safebunny.errors import SafeBunnyOptionError
from safebunny.exactly_once.inbox.reads import batch_done_sql, rows_sql, seen_sql
from safebunny.exactly_once.inbox.table import Inbox


def test_names_are_quoted_and_paths_read_as_delta_paths():
    assert table_ref("main.sb.inbox") == "`main`.`sb`.`inbox`"
    assert table_ref("we`ird") == "`we``ird`"
    assert table_ref("/Volumes/main/sb/inbox") == "delta.`/Volumes/main/sb/inbox`"
    assert table_ref("s3://b/in`box") == "delta.`s3://b/in``box`"


def test_seen_reads_the_node_s_window_of_done_rows_except_the_batch_s_own():
    sql = seen_sql("`inbox`", "ids_view")
    assert sql.startswith("SELECT DISTINCT t.messageId FROM `inbox` AS t JOIN `ids_view` AS i "
                          "ON t.messageId = i.messageId")
    for clause in ("t.node = :node", "t.processedDate >= :since", "t.status = 'done'",
                   "NOT (t.epoch = :epoch AND t.batchId = :batch)"):
        assert clause in sql
    assert "'" not in sql.replace("'done'", "")  # every value is a named parameter


def test_batch_done_rows_and_maintenance_statements():
    assert batch_done_sql("`i`") == ("SELECT 1 FROM `i` WHERE node = :node AND epoch = :epoch AND batchId = :batch "
                                     "LIMIT 1")
    assert rows_sql("`i`", False, False) == "SELECT * FROM `i`"
    assert rows_sql("`i`", True, True) == "SELECT * FROM `i` WHERE node = :node AND correlationId = :correlation"
    assert rows_sql("`i`", False, True) == "SELECT * FROM `i` WHERE correlationId = :correlation"
    assert maintenance_sql("`i`") == ["DELETE FROM `i` WHERE node = :node AND processedDate < :cutoff",
                                      "OPTIMIZE `i`", "VACUUM `i`"]


def test_the_backend_follows_the_table_and_can_be_chosen():
    assert Inbox("/tmp/sb/inbox", "billing").backend == "delta-rs"
    assert Inbox("main.sb.inbox", "billing").backend == "spark"
    assert Inbox("/Volumes/main/sb/inbox", "billing", backend="spark").backend == "spark"
    with pytest.raises(SafeBunnyOptionError, match="one of auto, delta-rs, spark; got 'hive'"):
        Inbox("/tmp/sb/inbox", "billing", backend="hive")
