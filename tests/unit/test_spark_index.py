"""The index of a node's done ids in an inbox by name, against a fake table (no Spark): no hit, no read of rows; a
hit confirmed against the table; the history's new commits accounted for (this process's markers from what it
recorded, another process's read by batch, another node's and maintenance's skipped, anything else rebuilt); and
"is this batch done" read from the markers' tags."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from safebunny.delta.commit_tags import commit_tag
from safebunny.delta.spark_index import SparkSeenIndex, marker_in

SINCE = dt.date(2026, 12, 1)


class FakeInbox:
    """An inbox table: its rows ``(node, messageId, epoch, batchId, status)`` and its history, newest first."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, str, str, int, str]] = []
        self.history: list[tuple[int, str, str | None, str]] = []
        self.scans: list[object] = []  # what was read of the rows: "all", a list of batches, or confirmed ids

    def commit(self, tag: str | None, operation: str = "WRITE") -> None:
        version = len(self.history)
        self.history.insert(0, (version, f"t{version}", tag, operation))

    def marker(self, node: str, epoch: str, batch: int, done: Sequence[str], failed: Sequence[str] = ()) -> list[str]:
        self.rows += [(node, m, epoch, batch, status) for status, ids in (("done", done), ("failed", failed))
                      for m in ids]
        self.commit(commit_tag(f"safebunny.inbox.{node}.{epoch}", batch))
        return list(done)

    def history_entries(self) -> list:
        return list(self.history)

    def done_ids(self, node: str, since: dt.date, batches: Sequence[tuple[str, int]] | None = None) -> list[str]:
        self.scans.append("all" if batches is None else sorted(batches))
        return [m for n, m, e, b, s in self.rows
                if n == node and s == "done" and (batches is None or (e, b) in batches)]

    def seen_by_scan(self, node: str, since: dt.date, message_ids: Sequence[str], epoch: str,
                     batch_id: int) -> set[str]:
        self.scans.append(sorted(message_ids))
        return {m for n, m, e, b, s in self.rows
                if n == node and s == "done" and m in message_ids and (e, b) != (epoch, batch_id)}


def test_no_hit_reads_no_rows_and_a_hit_is_confirmed() -> None:
    table = FakeInbox()
    index = SparkSeenIndex(table, "billing")
    assert index.lookup(["a"], SINCE, "e1", 0) == set()  # no table yet: nothing read, nothing built
    index.recorded("e1", 0, table.marker("billing", "e1", 0, ["m0", "m1"], failed=["m2"]))
    assert index.lookup(["m0", "m2", "x"], SINCE, "e1", 1) == {"m0"}  # built with one scan, m0 confirmed
    assert table.scans == ["all", ["m0"]]
    assert index.lookup(["m0"], SINCE, "e1", 0) == set()  # the batch's own rows are left out
    table.scans.clear()
    index.recorded("e1", 1, table.marker("billing", "e1", 1, ["m3"]))
    assert index.lookup(["y", "z"], SINCE, "e1", 2) == set()
    assert table.scans == []  # its own marker added from what it recorded; no hit, no read
    assert index.lookup(["m3"], SINCE, "e1", 2) == {"m3"}
    assert index.builds == 1


def _built(*done: str) -> tuple[FakeInbox, SparkSeenIndex]:
    """An inbox whose node billing did ``done`` in batch (e1, 0), and its index built by a first look-up."""
    table = FakeInbox()
    index = SparkSeenIndex(table, "billing")
    table.marker("billing", "e1", 0, list(done))
    index.lookup(["q"], SINCE, "e1", 1)
    return table, index


def test_other_writers_are_read_by_batch_skipped_or_rebuilt_from() -> None:
    table, index = _built("m0")
    table.scans.clear()
    table.marker("billing", "e2", 0, ["n0"])  # another driver of the node
    table.marker("shipping", "e3", 0, ["s0"])  # another node
    table.commit(None, "OPTIMIZE")
    assert index.lookup(["n0", "s0"], SINCE, "e1", 1) == {"n0"}
    assert table.scans == [[("e2", 0)], ["n0"]]  # the other driver's batch read, then the hit confirmed
    assert (index.builds, index.foreign_reads) == (1, 1)
    table.rows.append(("billing", "w0", "e9", 0, "done"))
    table.commit(None, "WRITE")  # a write without a marker's tag: the index cannot account for it
    assert index.lookup(["w0"], SINCE, "e1", 1) == {"w0"}
    assert index.builds == 2


def test_a_deleted_id_is_not_seen_though_its_hash_stays() -> None:
    table, index = _built("m0", "m1")
    table.rows = [row for row in table.rows if row[1] != "m0"]
    table.commit(None, "DELETE")
    assert index.lookup(["m0", "m1"], SINCE, "e1", 1) == {"m1"}
    assert index.builds == 1


def test_a_moved_window_builds_again() -> None:
    table, index = _built("m0")
    index.lookup(["q"], SINCE + dt.timedelta(days=1), "e1", 1)
    assert index.builds == 2


def test_batch_done_reads_the_markers_tags_and_the_look_ups_history_once() -> None:
    table = FakeInbox()
    index = SparkSeenIndex(table, "billing")
    table.marker("billing", "e1", 0, ["m0"])
    table.marker("billing", "e1", 1, ["m1"])
    index.lookup(["q"], SINCE, "e1", 1)
    read = index.history_read_for("e1", 1)
    assert read == table.history and index.history_read_for("e1", 1) is None  # once
    index.lookup(["q"], SINCE, "e1", 2)
    assert index.history_read_for("e1", 1) is None  # the last look-up was another batch's
    app = "safebunny.inbox.billing.e1"
    assert marker_in(read, app, 1) and marker_in(read, app, 0)
    assert marker_in(read, app, 2) is False  # the whole history (version 0 is in it): not done
    assert marker_in([], app, 0) is False
    cut = [entry for entry in read if entry[0] > 0]
    assert marker_in(cut, app, 1) and marker_in(cut, app, 2) is None  # cut by log cleanup: read the rows
