"""The inbox's driver-side index against real delta-rs tables: the same answers as a scan (window,
``done`` only, the batch's own rows left out, other nodes ignored), kept current across appends,
rebuilt after compaction, and no data read when nothing hits."""

import datetime as dt
import random

import pytest

from safebunny.delta.seen_index import SeenIndex, id_hashes
from safebunny.exactly_once.inbox.table import Inbox, InboxRow

NOW = dt.datetime(2026, 11, 22, 12, 0, tzinfo=dt.timezone.utc)


def _both(inbox, ids, epoch, batch, now=NOW):
    """(indexed answer, scan answer) for one look-up."""
    since = (now - inbox.window).date()
    return (inbox.seen(ids, epoch, batch, now=now), inbox.target.seen_by_scan(inbox.node, since, ids, epoch, batch))


def test_the_index_answers_as_the_scan_does(tmp_path):
    path = str(tmp_path / "inbox")
    billing, shipping = Inbox(path, "billing"), Inbox(path, "shipping")
    old = NOW - dt.timedelta(days=10)
    billing.record([InboxRow("old", None, None)], "E0", 0, now=old)  # outside the 7-day window
    billing.record([InboxRow(f"a{i}", None, None) for i in range(50)], "E1", 0, now=NOW)
    billing.record([InboxRow("f1", None, None, status="failed", reason="boom")], "E1", 1, now=NOW)
    shipping.record([InboxRow("s1", None, None)], "E1", 0, now=NOW)
    ids = ["old", "a3", "a49", "f1", "s1", "zz"]
    indexed, scanned = _both(billing, ids, "E1", 5)
    assert indexed == scanned == {"a3", "a49"}
    # a replay of batch (E1, 0) does not see its own rows; another epoch's batch 0 does
    assert _both(billing, ids, "E1", 0) == (set(), set())
    assert _both(billing, ids, "E2", 0)[0] == {"a3", "a49"}


def test_the_index_follows_appends_and_rebuilds_after_compaction(tmp_path):
    inbox = Inbox(str(tmp_path / "inbox"), "billing")
    rng = random.Random(3)
    written: set[str] = set()
    for batch in range(6):
        ids = [f"m{rng.randrange(10_000)}" for _ in range(200)]
        indexed, scanned = _both(inbox, ids, "E", batch)
        assert indexed == scanned == written & set(ids)
        new = [i for i in dict.fromkeys(ids) if i not in indexed]
        inbox.record([InboxRow(i, None, None) for i in new], "E", batch, now=NOW)
        written |= set(new)
    index = inbox.target._indexes["billing"]
    inbox.seen(["x"], "E", 6, now=NOW)  # the index takes the last append in at the next look-up
    assert len(index) == len(written) and index.rebuilds == 0
    inbox.target.handle().optimize.compact()
    probe = sorted(written)[:100] + ["nope"]
    assert _both(inbox, probe, "E", 99) == (set(probe[:100]), set(probe[:100]))
    assert index.rebuilds == 1 and len(index) == len(written)


def test_a_look_up_without_a_hit_reads_no_data_file(tmp_path, monkeypatch):
    inbox = Inbox(str(tmp_path / "inbox"), "billing")
    inbox.record([InboxRow(f"a{i}", None, None) for i in range(20)], "E", 0, now=NOW)
    assert inbox.seen(["a1"], "E", 1, now=NOW) == {"a1"}  # builds the index
    reads = []
    original = SeenIndex._read
    monkeypatch.setattr(SeenIndex, "_read", lambda self, paths, columns: reads.append(paths) or original(
        self, paths, columns))
    assert inbox.seen(["b1", "b2"], "E", 1, now=NOW) == set()
    assert reads == []


def test_hashes_are_stable_64_bit_values():
    hashes = id_hashes(["m1", "m2", "m1"])
    assert hashes.dtype.name == "int64" and hashes[0] == hashes[2] != hashes[1]
    assert int(id_hashes(["m1"])[0]) == int(id_hashes(["m1"])[0])


def test_the_first_look_up_builds_the_node_index(tmp_path):
    inbox = Inbox(str(tmp_path / "inbox"), "billing")
    inbox.record([InboxRow("a", None, None)], "E", 0, now=NOW)
    assert not inbox.target._indexes
    assert inbox.seen(["a", "b"], "E", 1, now=NOW) == {"a"}
    assert set(inbox.target._indexes) == {"billing"}


@pytest.mark.parametrize("node", ["café", "a=b", "sp ace", "x%2Fy", "c:d"])
def test_the_index_serves_node_names_that_paths_escape(tmp_path, node, caplog):
    # Delta's log keeps file paths as URIs (``node=sp%2520ace/...`` for the directory ``node=sp%20ace``);
    # the index must read those files, not give up and scan with a warning on every batch.
    inbox = Inbox(str(tmp_path / "inbox"), node)
    inbox.record([InboxRow(f"m{i}", None, None) for i in range(5)], "E", 0, now=NOW)
    inbox.record([InboxRow("c1", None, None, status="claimed")], "E", 1, now=NOW)  # only done counts
    with caplog.at_level("WARNING", logger="safebunny.inbox"):
        indexed, scanned = _both(inbox, ["m0", "m4", "c1", "zz"], "E", 2)
    assert indexed == scanned == {"m0", "m4"}
    assert len(inbox.target._indexes[node]) == 5
    assert not [r for r in caplog.records if "could not be used" in r.getMessage()]
