"""The inbox look-up on a table by name (Delta Spark): the driver's index of a node's done ids answers it with no
read of the table's rows (its history's newest commits only) when nothing was seen, keeps up with markers written
by another process and by other nodes, with deletes and with writes it cannot account for, and never drops an id the
table does not confirm."""

from __future__ import annotations

import datetime as dt

from safebunny.exactly_once.inbox.table import Inbox, InboxRow

NOW = dt.datetime(2026, 12, 7, 6, 0, tzinfo=dt.timezone.utc)


def _rows(ids, status="done"):
    return [InboxRow(mid, "c", None, status) for mid in ids]


def _jobs(spark):
    return spark.sparkContext._jsc.sc().dagScheduler().nextJobId()


def test_the_index_answers_from_the_driver_and_keeps_up_with_every_writer(spark, database, tmp_path):
    table = f"{database}.inbox"
    mine = Inbox(table, "billing", state=str(tmp_path / "state"))
    mine.record(_rows([f"m{i}" for i in range(10)]) + _rows(["m10"], "failed"), "e1", 0, now=NOW)
    assert mine.seen(["m0", "m5", "m10", "x"], "e1", 1, now=NOW) == {"m0", "m5"}  # built: one scan
    assert mine.seen(["m0"], "e1", 0, now=NOW) == set()  # the batch's own rows are left out
    assert mine.batch_done("e1", 0) and not mine.batch_done("e1", 1)

    mine.record(_rows(["m20", "m21"]), "e1", 1, now=NOW)
    before = _jobs(spark)
    assert mine.seen(["y", "z"], "e1", 2, now=NOW) == set()  # its own marker needs no read; no hit, no read
    looked = _jobs(spark) - before
    mine.target.history_entries()  # what the look-up cost: the history's read, nothing else
    assert looked == _jobs(spark) - before - looked
    assert mine.seen(["m21", "z"], "e1", 2, now=NOW) == {"m21"}  # a hit is confirmed against the table

    other = Inbox(table, "billing", state=str(tmp_path / "state"))  # another driver of the node
    other.record(_rows(["n0", "n1"]), "e2", 0, now=NOW)
    Inbox(table, "shipping", state=str(tmp_path / "state")).record(_rows(["s0"]), "e3", 0, now=NOW)
    assert mine.seen(["n1", "s0", "q"], "e1", 2, now=NOW) == {"n1"}  # another node's ids are not this node's
    assert mine.batch_done("e2", 0)

    spark.sql(f"DELETE FROM {table} WHERE messageId = 'm0'")  # retention, or a person: the hash stays, unconfirmed
    assert mine.seen(["m0", "m1"], "e1", 2, now=NOW) == {"m1"}

    # a write the index cannot account for (no marker's tag): it reads the node's rows again
    spark.createDataFrame([("billing", "w0", "done", "e9", 0, "2026-12-07")],
                          "node string, messageId string, status string, epoch string, batchId long, "
                          "processedDate string").write.format("delta").mode("append") \
        .option("mergeSchema", "true").saveAsTable(table)
    assert mine.seen(["w0", "m1"], "e1", 2, now=NOW) == {"w0", "m1"}
    assert mine.target.inbox.index("billing").builds == 2
