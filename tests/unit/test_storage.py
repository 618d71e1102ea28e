"""The storage layer (safebunny.storage): locations, whole and conditional writes, records in a folder, leases; and
where a step's state goes (an inbox by table name needs a state location, never the driver's working directory)."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import time
from dataclasses import replace

import pytest
from pyarrow import fs as pafs

from safebunny import Step, StepSettings
from safebunny.errors import SafeBunnyOptionError
from safebunny.exactly_once.inbox.table import Inbox, state_location
from safebunny.options.connection import ConnectionSettings
from safebunny.storage.lease import Lease, Renewer, read_leases, write_lease
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
    for make in (lambda: Step("billing", inbox="main.sagas.inbox", settings=StepSettings(
            connection=ConnectionSettings(URI))),
                 lambda: Inbox("main.sagas.inbox", "billing").state):
        with pytest.raises(SafeBunnyOptionError, match=r"table name.*StepSettings\(state=\.\.\.\)") as caught:
            make()
        assert caught.value.option == "state"
    assert os.listdir(tmp_path) == []


def test_a_step_keeps_claims_outcomes_and_decisions_in_its_state_location(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    step = Step("billing", inbox="main.sagas.inbox", settings=StepSettings(
            connection=ConnectionSettings(URI), state=str(tmp_path / "state")))
    assert step._claimed.claims.folder == f"{tmp_path}/state/_claims/billing"
    assert step._rows.outcomes.root == f"{tmp_path}/state"
    assert step._claimed.decisions.path == "main.sagas.inbox_decisions", "by name beside an inbox by name"
    assert step._frames.folder == f"{tmp_path}/state/_frames/billing", "DataFrame outcomes beside the claims"
    by_path = Step("billing", inbox=str(tmp_path / "inbox"), settings=StepSettings(connection=ConnectionSettings(URI)))
    assert by_path._claimed.claims.folder == f"{tmp_path}/inbox/_claims/billing", "by default beside the inbox"
    assert by_path._claimed.decisions.path == f"{tmp_path}/inbox/_decisions"


def test_a_lease_round_trips_with_its_payload_beside_it_under_the_holder_key_its_user_names(tmp_path):
    path = f"{tmp_path}/l.json"
    lease = Lease.mine("reader-1", {"id": "j1", "logged": False})
    assert write_lease(LOCAL, path, lease, "instance", if_absent=True)
    assert not write_lease(LOCAL, path, lease.renew(), "instance", if_absent=True)  # there already
    raw = json.loads(read_record(LOCAL, path))
    assert raw["instance"] == "reader-1" and raw["id"] == "j1" and raw["pid"] == os.getpid()
    assert Lease.from_json(read_record(LOCAL, path), "instance") == lease
    write_lease(LOCAL, f"{tmp_path}/junk.json", lease, "instance")
    (tmp_path / "junk.json").write_text("{not json")
    assert read_leases(LOCAL, str(tmp_path), "instance", lambda lease: lease.holder) == ["reader-1"]


def test_records_of_the_formats_before_leases_read_back_as_leases():
    """A journal owner record from before renewals (no ``renewed``) and a driver lease renewed in ISO 8601."""
    owner = Lease.from_json(b'{"id": "j", "instance": "i", "host": "h", "pid": 7, "pid_start": "9", "claimed": 1.5, '
                            b'"logged": true, "queue": "q"}', "instance")
    assert (owner.holder, owner.host, owner.pid, owner.pid_start, owner.renewed) == ("i", "h", 7, "9", None)
    assert owner.payload == {"id": "j", "claimed": 1.5, "logged": True, "queue": "q"}
    driver = Lease.from_json(b'{"driver": "a", "host": "h", "pid": 7, "started": "2026-11-26T09:00:00+00:00", '
                             b'"renewed": "2026-11-26T10:00:00+00:00", "running": {}, "holding": {}}', "driver")
    assert driver.renewed == dt.datetime(2026, 11, 26, 10, tzinfo=dt.timezone.utc).timestamp()


def test_a_holder_lives_by_its_renewer_here_by_its_process_on_this_host_and_by_its_renewals_elsewhere():
    lease = Lease.mine("h-1", {}, renewed=time.time() - 1000)
    assert not lease.live(10)  # this process, no renewer: this holder stopped
    renewer = Renewer("h-1", lambda: None, 0.01, lambda exc: None)
    renewer.start()
    assert lease.live(10)
    renewer.stop(wait_s=5)
    assert not renewer.is_alive() and not lease.live(10)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        other = replace(lease, pid=child.pid, pid_start=None)
        assert other.live(10)  # another process of this host that runs, whatever its renewals
    finally:
        child.kill()
        child.wait()
    assert not other.live(10)
    elsewhere = replace(lease, host="elsewhere.example")
    assert not elsewhere.live(10) and elsewhere.renew().live(10) and not replace(elsewhere, renewed=None).live(10)


def test_one_holder_name_renewing_one_lease_does_not_make_its_other_leases_live():
    lease = Lease.mine("h-3", {}, renewed=time.time() - 1000)
    renewer = Renewer("h-3", lambda: None, 0.01, lambda exc: None, path="/root/drivers/_leases/h-3.json")
    renewer.start()
    try:
        assert lease.live(10, path="/root/drivers/_leases/h-3.json")
        assert not lease.live(10, path="/journal/_owner.json") and not lease.live(10)
    finally:
        renewer.stop(wait_s=5)


def test_a_renewal_that_fails_is_reported_and_the_next_one_tries_again():
    calls, errors = [], []

    def renew():
        calls.append(1)
        if len(calls) == 1:
            raise OSError("storage out")

    renewer = Renewer("h-2", renew, 0.01, errors.append)
    renewer.start()
    deadline = time.monotonic() + 5
    while len(calls) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    renewer.stop(wait_s=5)
    assert len(calls) >= 3 and [str(e) for e in errors] == ["storage out"]
