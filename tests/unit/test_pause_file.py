"""The pause file read by the queue source (option ``pauseFile``) and written by a saga's breaker."""

from __future__ import annotations

import time

import pytest

from safebunny.errors import SafeBunnyOptionError
from safebunny.saga.define.config import SagaLayout
from safebunny.storage.pause import clear_pause, paused_until, write_pause


def test_a_pause_is_read_until_it_ends_then_cleared(tmp_path) -> None:
    path = str(tmp_path / "control" / "n.T.pause")
    assert paused_until(path) is None
    until = write_pause(path, 30)
    assert paused_until(path) == until and until > time.time() + 29
    assert paused_until(path, now=until + 1) is None  # over by itself
    clear_pause(path)
    clear_pause(path)  # nothing to clear: no error
    assert paused_until(path) is None


def test_a_file_that_is_not_a_time_pauses_nothing(tmp_path) -> None:
    path = tmp_path / "p"
    path.write_text("soon")
    assert paused_until(str(path)) is None
    path.write_text("")
    assert paused_until(str(path)) is None


def test_a_step_s_pause_file_is_under_the_root_s_control_folder(tmp_path) -> None:
    path = SagaLayout(str(tmp_path)).pause_file("billing", "InvoiceRequested")
    assert path == str(tmp_path / "control" / "billing.InvoiceRequested.pause")


def test_a_file_uri_works_like_its_path(tmp_path) -> None:
    uri = (tmp_path / "control" / "n.T.pause").as_uri()
    assert uri.startswith("file:///")
    until = write_pause(uri, 30)
    assert (tmp_path / "control" / "n.T.pause").read_text() == repr(until)  # written where the path says
    assert paused_until(uri) == until == paused_until(str(tmp_path / "control" / "n.T.pause"))
    clear_pause(uri)
    assert not (tmp_path / "control" / "n.T.pause").exists()
    assert paused_until(uri) is None
    clear_pause(uri)  # nothing to clear: no error


def test_a_uri_root_keeps_its_pause_files_under_it(tmp_path) -> None:
    path = SagaLayout(tmp_path.as_uri()).pause_file("billing", "InvoiceRequested")
    until = write_pause(path, 5)
    assert (tmp_path / "control" / "billing.InvoiceRequested.pause").read_text() == repr(until)
    assert paused_until(path) == until
    clear_pause(path)
    assert paused_until(path) is None


def test_a_uri_pyarrow_cannot_open_is_a_clear_error() -> None:
    with pytest.raises(SafeBunnyOptionError, match="pauseFile"):
        paused_until("nosuchscheme://bucket/p")
