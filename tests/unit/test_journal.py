import pyarrow as pa
import pytest

from safebunny.errors import SafeBunnyDataLossError, SafeBunnyOptionError
from safebunny.queues.journal import Journal, batch_file_name, parse_batch_file_name


def _batch(n: int) -> pa.RecordBatch:
    return pa.record_batch({"value": [f"m{i}".encode() for i in range(n)]})


def test_names_round_trip_and_sort_by_sequence():
    assert parse_batch_file_name(batch_file_name(5, 17)) == (5, 17)
    assert batch_file_name(9, 10) < batch_file_name(10, 100)
    assert parse_batch_file_name("other.arrow") is None


def test_write_then_read_returns_the_same_rows(tmp_path):
    journal = Journal(str(tmp_path / "j"))
    journal.ensure()
    journal.write(0, 3, _batch(3))
    assert journal.exists(0, 3)
    got = pa.Table.from_batches(list(journal.read(0, 3)))
    assert got.column("value").to_pylist() == [b"m0", b"m1", b"m2"]
    assert not [p for p in (tmp_path / "j").iterdir() if p.name.endswith(".tmp")]


def test_rewrite_replaces_an_orphan_batch(tmp_path):
    journal = Journal(str(tmp_path))
    journal.write(0, 3, _batch(3))
    journal.write(0, 3, _batch(3).slice(0, 3))
    assert len(list((tmp_path).glob("*.arrow"))) == 1


def test_missing_batch_is_a_clear_data_loss_error(tmp_path):
    journal = Journal(str(tmp_path))
    with pytest.raises(SafeBunnyDataLossError) as info:
        list(journal.read(10, 20))
    message = str(info.value)
    assert "(10, 20]" in message and "failOnDataLoss" in message and str(tmp_path) in message


def test_delete_through_keeps_later_batches(tmp_path):
    journal = Journal(f"file://{tmp_path}")
    for start, end in [(0, 3), (3, 6), (6, 9)]:
        journal.write(start, end, _batch(end - start))
    (tmp_path / (batch_file_name(3, 6) + ".abc.tmp")).write_bytes(b"half")
    assert journal.delete_through(6) == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == [batch_file_name(6, 9)]


def test_delete_removes_one_batch_by_name_and_tolerates_a_missing_one(tmp_path):
    journal = Journal(str(tmp_path))
    for start, end in [(0, 3), (3, 6)]:
        journal.write(start, end, _batch(end - start))
    assert journal.delete(0, 3) is True
    assert journal.delete(0, 3) is False  # already gone: a replayed commit, a takeover's sweep
    assert sorted(p.name for p in tmp_path.iterdir()) == [batch_file_name(3, 6)]


def test_files_lists_batches_and_temporary_files_with_their_end(tmp_path):
    journal = Journal(str(tmp_path))
    journal.write(0, 3, _batch(3))
    (tmp_path / (batch_file_name(3, 6) + ".abc.tmp")).write_bytes(b"half")
    (tmp_path / "journal-owner.json").write_text("{}")
    assert sorted((p.rsplit("/", 1)[1], end) for p, end in journal.files()) == [
        (batch_file_name(0, 3), 3), (batch_file_name(3, 6) + ".abc.tmp", 6)]
    assert journal.path_of(0, 3) in {p for p, _ in journal.files()}
    assert Journal(str(tmp_path / "absent")).files() == []


def test_unwritable_location_names_the_option(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(SafeBunnyOptionError, match="journalLocation"):
        Journal(str(blocker / "sub")).ensure()


def test_a_batch_of_several_record_batches_is_written_and_read_back_in_order(tmp_path):
    """A journaled batch may hold several record batches (bodies over 2 GiB cannot be one)."""
    journal = Journal(str(tmp_path))
    parts = [_batch(3), _batch(2), _batch(4)]
    journal.write(0, 9, parts)
    back = list(journal.read(0, 9))
    assert [b.num_rows for b in back] == [3, 2, 4]
    assert all(b.equals(p) for b, p in zip(back, parts, strict=True))
    journal.write(9, 18, pa.Table.from_batches(parts))
    assert [b.num_rows for b in journal.read(9, 18)] == [3, 2, 4]
    with pytest.raises(ValueError):
        journal.write(18, 18, [])


def test_object_stores_are_told_from_local_filesystems():
    """write_atomically writes an object store's object directly (a PUT is whole or absent; a rename there is a
    copy and a delete), and keeps temp-file-then-rename on a local filesystem."""
    from pyarrow import fs as pafs

    from safebunny.storage.location import is_object_store

    assert not is_object_store(pafs.LocalFileSystem())
    assert not is_object_store(pafs.SubTreeFileSystem("/tmp", pafs.LocalFileSystem()))
    s3 = pafs.S3FileSystem(anonymous=True, region="us-east-1")
    assert is_object_store(s3) and is_object_store(pafs.SubTreeFileSystem("bucket/x", s3))
