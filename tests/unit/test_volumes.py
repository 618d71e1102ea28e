"""Unity Catalog volumes: a delta-rs table or a saga's root under /Volumes fails at construction, writing nothing."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

from safebunny import Saga, SagaSettings, Step, StepSettings, append, merge
from safebunny.delta.delta_rs import DeltaRsTarget
from safebunny.errors import SafeBunnyOptionError
from safebunny.exactly_once import Inbox
from safebunny.options.connection import ConnectionSettings
from safebunny.storage.volumes import is_volume_path, refuse_volume

URI = "amqp://guest:guest@127.0.0.1:5672/%2F"
VOLUME = "/Volumes/main/sagas/state/orders"


@pytest.mark.parametrize("path", [
    VOLUME, "/Volumes", "dbfs:/Volumes/main/s/v/t", "dbfs:///Volumes/main/s/v/t", "file:/Volumes/main/s/v/t",
    "file:///Volumes/main/s/v/t", "DBFS:/Volumes/x", "/Volumes/main/../main/s/v",
])
def test_volume_paths_are_recognised(path: str) -> None:
    assert is_volume_path(path)


@pytest.mark.parametrize("path", [
    "s3://bucket/Volumes/x", "abfss://c@a.dfs.core.windows.net/Volumes/x", "/dbfs/tmp/x", "/tmp/Volumes/x",
    "/volumes/x", "/VolumesX/y", "dbfs:/tmp/x", "relative/path", "",
])
def test_other_paths_are_not_volumes(path: str) -> None:
    assert not is_volume_path(path)


def test_a_relative_path_that_resolves_under_volumes_is_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os.path, "abspath", lambda p: p if p.startswith("/") else f"/Volumes/main/s/v/{p}")
    assert is_volume_path("inbox")


def test_the_error_names_the_path_the_option_and_both_ways_that_work() -> None:
    with pytest.raises(SafeBunnyOptionError) as caught:
        refuse_volume(f"dbfs:{VOLUME}/inbox", "The inbox", "inbox")
    message = str(caught.value)
    assert caught.value.option == "inbox"
    assert f"'dbfs:{VOLUME}/inbox'" in message and "Unity Catalog volume" in message
    assert "s3://" in message and "abfss://" in message  # the volume's cloud URI, with delta-rs
    assert "Unity Catalog table by name" in message and "Spark Delta" in message
    assert "os error 38" in message


def test_a_saga_root_error_offers_the_cloud_uri_and_the_tables_setting() -> None:
    with pytest.raises(SafeBunnyOptionError) as caught:
        refuse_volume(VOLUME, "The saga's root", "root")
    assert caught.value.option == "root"
    assert "s3://" in str(caught.value) and "SagaSettings(tables='main.sagas')" in str(caught.value)


def test_a_saga_with_its_root_on_a_volume_fails_at_construction_unless_its_tables_are_by_name() -> None:
    for root in (VOLUME, f"dbfs:{VOLUME}"):
        with pytest.raises(SafeBunnyOptionError, match="saga's root is on a Unity Catalog volume") as caught:
            Saga("shop", uri=URI, root=root)
        assert caught.value.option == "root"
    saga = Saga("shop-eu", uri=URI, root=VOLUME, settings=SagaSettings(tables="main.sagas"))
    layout = saga.config.layout
    assert (saga.inbox_path, layout.started, layout.state) == (
        "main.sagas.shop_eu_inbox", "main.sagas.shop_eu_started", f"{VOLUME}/state")
    for bad in ("main.sagas.x", "main-cat.sagas", "", "main..s"):
        with pytest.raises(SafeBunnyOptionError, match="tables must name the schema") as caught:
            SagaSettings(tables=bad)
        assert caught.value.option == "tables"


def test_a_step_with_its_delta_rs_inbox_on_a_volume_fails_at_construction() -> None:
    for inbox in (f"{VOLUME}/inbox", f"dbfs:{VOLUME}/inbox"):
        with pytest.raises(SafeBunnyOptionError, match="inbox is on a Unity Catalog volume") as caught:
            Step("billing", inbox=inbox, settings=StepSettings(connection=ConnectionSettings(URI)))
        assert caught.value.option == "inbox"
    with pytest.raises(SafeBunnyOptionError, match="inbox is on a Unity Catalog volume"):
        Inbox(f"{VOLUME}/inbox", "billing", backend="delta-rs")


def test_an_inbox_by_table_name_is_not_a_path(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    # a name on Spark Delta is fine even when the driver's working directory is under /Volumes
    monkeypatch.setattr(os.path, "abspath", lambda p: p if p.startswith("/") else f"/Volumes/main/s/v/{p}")
    assert Inbox("main.sagas.inbox", "billing").backend == "spark"


def test_effects_on_a_volume_fail_when_the_handler_builds_them() -> None:
    rows = pa.table({"messageId": ["m1"], "v": [1]})
    with pytest.raises(SafeBunnyOptionError, match="effect table is on a Unity Catalog volume") as caught:
        append(rows, f"{VOLUME}/orders")
    assert caught.value.option == "table"
    with pytest.raises(SafeBunnyOptionError, match="effect table is on a Unity Catalog volume"):
        merge(rows, f"dbfs:{VOLUME}/orders", on="messageId")
    with pytest.raises(SafeBunnyOptionError, match="Delta table is on a Unity Catalog volume"):
        DeltaRsTarget(f"{VOLUME}/orders")
    assert append(rows, "main.sales.orders").table == "main.sales.orders"  # a table name: Spark Delta


def test_nothing_is_written_on_the_way_to_the_error(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SafeBunnyOptionError):
        Saga("shop", uri=URI, root=f"dbfs:{VOLUME}")
    with pytest.raises(SafeBunnyOptionError):
        Step("billing", inbox=f"dbfs:{VOLUME}/inbox", settings=StepSettings(connection=ConnectionSettings(URI)))
    assert list(tmp_path.iterdir()) == []  # a 'dbfs:' path was once made relative to the working directory


def test_a_step_state_location_on_a_volume_is_refused_only_where_a_delta_rs_table_would_go() -> None:
    """A Spark Delta inbox by path keeps its state (and its delta-rs row decisions) off the volume; an inbox by
    name keeps its row decisions by name beside it, so its state may be a volume."""
    with pytest.raises(SafeBunnyOptionError, match="state location .* is on a Unity Catalog volume") as caught:
        Step("billing", inbox=f"{VOLUME}/inbox", settings=StepSettings(connection=ConnectionSettings(URI),
                                                                      inbox_backend="spark"))
    assert caught.value.option == "state" and "s3://" in str(caught.value)
    assert "inbox by name" in str(caught.value)
    step = Step("billing", inbox="main.sagas.inbox", settings=StepSettings(connection=ConnectionSettings(URI),
                                                                           state=VOLUME))
    assert step.inbox.state == VOLUME and step.inbox.decisions == "main.sagas.inbox_decisions"


def _source(**options):
    from safebunny.options.connection import ConnectionSettings
    from safebunny.options.source import SourceOptions

    return SourceOptions(ConnectionSettings(URI), queue="q", **options)


def test_a_journal_location_on_a_volume_is_accepted(tmp_path) -> None:
    """A journal is plain files, each written whole on a volume (storage/writes.py)."""
    from pyspark_safebunny.schema import require_journal
    from safebunny.queues.journal import Journal

    assert Journal(f"dbfs:{VOLUME}/journal").location == f"dbfs:{VOLUME}/journal"
    require_journal(_source(journal_location=f"{VOLUME}/journal"), "quorum")
    require_journal(_source(journal_location=str(tmp_path)), "quorum")
    require_journal(_source(), "stream")


def test_files_on_a_volume_are_written_whole_in_place_never_renamed_or_linked(tmp_path, monkeypatch) -> None:
    """What a volume's mount lacks is never called there: the bytes go to the file itself (tests/delta_spark/
    test_saga_on_volume.py shows it on a FUSE mount whose rename and link fail)."""
    from pyarrow import fs as pafs

    from safebunny.storage import writes

    monkeypatch.setattr(writes, "is_volume_path", lambda p: p.startswith(str(tmp_path)))
    monkeypatch.setattr(os, "link", lambda *a: pytest.fail("a hard link on a volume"))
    local, path = pafs.LocalFileSystem(), f"{tmp_path}/a/record.json"
    assert writes.writes_whole(local, path) and not writes.writes_whole(local, "/tmp/elsewhere")
    seen: list[list[str]] = []

    def data(sink) -> None:  # type: ignore[no-untyped-def]
        sink.write(b"{}")
        seen.append(sorted(os.listdir(tmp_path / "a")))

    writes.write_atomically(local, path, data)
    assert seen == [["record.json"]], "written in place, no temporary file"
    assert writes.write_if_absent(local, f"{tmp_path}/a/owner.json", b"1")
    assert not writes.write_if_absent(local, f"{tmp_path}/a/owner.json", b"2")
    assert sorted(os.listdir(tmp_path / "a")) == ["owner.json", "record.json"]
