"""The storage layer (safebunny.storage): locations, whole and conditional writes, records in a folder; and where
a step's state goes (an inbox by table name needs a state location, never the driver's working directory)."""

from __future__ import annotations

import os

import pytest
from pyarrow import fs as pafs

from safebunny import Step
from safebunny.errors import SafeBunnyOptionError
from safebunny.exactly_once.inbox import Inbox, state_location
from safebunny.storage.location import absolute_location, local_path, resolve_under
from safebunny.storage.records import list_records, read_record, read_records, remove_record
from safebunny.storage.writes import write_atomically, write_if_absent

URI = "amqp://guest:guest@127.0.0.1:5672/%2F"
LOCAL = pafs.LocalFileSystem()


def test_resolve_under_joins_parts_below_a_location(tmp_path):
    filesystem, path = resolve_under(f"{tmp_path}/", "root", "poison", "a.json")
    assert isinstance(filesystem, pafs.LocalFileSystem) and path == f"{tmp_path}/poison/a.json"
    filesystem, path = resolve_under(f"file://{tmp_path}", "root", "status")
    assert path == f"{tmp_path}/status"
    with pytest.raises(SafeBunnyOptionError, match="Option 'state' is not a path or URI") as caught:
        resolve_under("nosuchscheme://x", "state", "y")
    assert caught.value.option == "state"


def test_absolute_location_resolves_local_paths_and_keeps_uris(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert absolute_location("state") == f"{tmp_path}/state"
    assert absolute_location("~/x") == os.path.expanduser("~/x")
    assert absolute_location("s3://bucket/state") == "s3://bucket/state"
    assert absolute_location("file:///tmp/x") == "file:///tmp/x"


def test_local_path_tells_this_machine_s_paths_from_other_filesystems():
    assert local_path("/data/t") == "/data/t" and local_path("file:///data/t") == "/data/t"
    assert local_path("dbfs:/x") == "dbfs:/x"  # no scheme separator: os calls find nothing there, as before
    assert local_path("s3://b/t") is None and local_path("hdfs://nn/t") is None


def test_records_are_listed_filtered_read_and_removed(tmp_path):
    folder = f"{tmp_path}/records"
    assert list_records(LOCAL, folder) == [], "a folder not there yet holds no records"
    for name, data in (("a.json", b"1"), ("b.json", b"oops"), ("c.txt", b"3")):
        write_atomically(LOCAL, f"{folder}/{name}", data)
    os.makedirs(f"{folder}/sub.json")  # a folder is never a record
    listed = sorted(info.base_name for info in list_records(LOCAL, folder, ".json"))
    assert listed == ["a.json", "b.json"]
    files = sorted(list_records(LOCAL, folder, ".json"), key=lambda i: i.base_name)
    assert read_records(LOCAL, files, int, skip=(ValueError,)) == [1], "a record that does not parse is left out"
    with pytest.raises(ValueError):
        read_records(LOCAL, files, int)
    remove_record(LOCAL, f"{folder}/a.json")
    assert read_records(LOCAL, files, lambda b: b) == [b"oops"], "a record removed since it was listed is left out"
    assert read_record(LOCAL, f"{folder}/a.json") is None
    assert remove_record(LOCAL, f"{folder}/b.json") and not remove_record(LOCAL, f"{folder}/b.json")


def test_write_if_absent_creates_once_and_leaves_no_temporary_file(tmp_path):
    path = f"{tmp_path}/owner.json"
    assert write_if_absent(LOCAL, path, b"first")
    assert not write_if_absent(LOCAL, path, b"second")
    assert read_record(LOCAL, path) == b"first"
    assert os.listdir(tmp_path) == ["owner.json"]


def test_the_state_of_an_inbox_by_path_is_its_folder_unless_named(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert state_location("inbox/", None) == f"{tmp_path}/inbox"
    assert state_location("s3://b/inbox", None) == "s3://b/inbox"
    assert state_location("inbox", "s3://b/state") == "s3://b/state"
    assert state_location("main.sagas.inbox", "state") == f"{tmp_path}/state"


def test_an_inbox_by_table_name_without_a_state_location_is_refused(tmp_path, monkeypatch):
    """It used to put claims, outcome logs and decisions in a folder named after the table in the driver's
    working directory."""
    monkeypatch.chdir(tmp_path)
    for make in (lambda: Step("billing", inbox="main.sagas.inbox", uri=URI),
                 lambda: Inbox("main.sagas.inbox", "billing").state):
        with pytest.raises(SafeBunnyOptionError, match=r"table name.*Step\(\.\.\., state=\.\.\.\)") as caught:
            make()
        assert caught.value.option == "state"
    assert os.listdir(tmp_path) == []


def test_a_step_keeps_claims_outcomes_and_decisions_in_its_state_location(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    step = Step("billing", inbox="main.sagas.inbox", uri=URI, state=str(tmp_path / "state"))
    assert step.claims.folder == f"{tmp_path}/state/_claims/billing"
    assert step.outcomes.root == f"{tmp_path}/state"
    assert step.decisions.path == f"{tmp_path}/state/_decisions"
    by_path = Step("billing", inbox=str(tmp_path / "inbox"), uri=URI)
    assert by_path.claims.folder == f"{tmp_path}/inbox/_claims/billing", "by default beside an inbox given by path"
