"""The reader deletes a committed batch's journal file by name; only its first commit after a start lists the
journal, for what an earlier process left, and nothing is deleted before its batch is committed."""

from __future__ import annotations

import pyarrow as pa

from helpers import publish_numbered, queue_reader
from safebunny.queues.journal import Journal, batch_file_name


def _names(path) -> list[str]:  # type: ignore[no-untyped-def]
    return sorted(p.name for p in path.iterdir() if p.name.startswith("batch-"))


def test_commits_delete_by_name_and_list_once(amqp_uri, make_queue, tmp_path, monkeypatch):
    queue = make_queue()
    publish_numbered(amqp_uri, queue, 30)
    root = tmp_path / "j"
    # an earlier process's leftovers: a batch past the first commit and a half-written temporary file
    earlier = Journal(str(root))
    earlier.ensure()
    earlier.write(10, 25, pa.record_batch({"value": [b"old"] * 15}))
    (root / (batch_file_name(12, 14) + ".dead.tmp")).write_bytes(b"half")
    listings = []
    files = Journal.files
    monkeypatch.setattr(Journal, "files", lambda self: listings.append(1) or files(self))

    reader = queue_reader(amqp_uri, queue, str(root), maxMessagesPerTrigger="10")
    try:
        limit = reader.getDefaultReadLimit()
        o0 = reader.initialOffset()
        o1 = reader.latestOffset(o0, limit)  # (0, 10]
        o2 = reader.latestOffset(o1, limit)  # (10, 20]: planned before (0, 10] is committed, as Spark does
        assert (o1["seq"], o2["seq"]) == (10, 20)
        tmp = batch_file_name(12, 14) + ".dead.tmp"
        reader.commit(o1)  # first commit: lists; deletes (0, 10], keeps what ends later
        assert len(listings) == 1
        assert _names(root) == sorted([batch_file_name(10, 20), batch_file_name(10, 25), tmp])
        o3 = reader.latestOffset(o2, limit)  # (20, 30]
        reader.commit(o2)  # (10, 20] by name, the leftover temporary file (end 14); (10, 25] ends after 20: stays
        assert _names(root) == [batch_file_name(10, 25), batch_file_name(20, 30)]
        reader.commit(o3)  # by name: (20, 30]; the leftover's end is reached now
        assert _names(root) == []
        assert len(listings) == 1  # no listing after the first commit
    finally:
        reader.stop()
