"""``dir(safebunny)`` lists the public API only: no ``Any``, ``TYPE_CHECKING``, ``annotations`` or ``sys``."""

from __future__ import annotations

import importlib
import importlib.util
import re

import pytest

import safebunny
from safebunny._lazy import MOVED
from safebunny.errors import SafeBunnyError, SafeBunnyMovedError


def test_dir_of_safebunny_is_its_public_names():
    names = dir(safebunny)
    assert not {"Any", "TYPE_CHECKING", "annotations", "sys", "typing"} & set(names)
    assert names == sorted(set(safebunny.__all__))
    for name in names:
        getattr(safebunny, name)  # each resolves (lazy names too)
    assert "error_of" in names


def test_a_module_imported_by_its_path_before_it_moved_is_our_error_naming_the_new_one():
    for old, new in (("safebunny.saga.topology", "safebunny.saga.define.topology"),
                     ("safebunny.saga.status", "safebunny.saga.look.status"),
                     ("safebunny.saga.queries", "safebunny.saga.run.queries")):
        with pytest.raises(SafeBunnyMovedError, match=f"{old} moved to {new}") as raised:
            importlib.import_module(old)
        assert isinstance(raised.value, SafeBunnyError) and isinstance(raised.value, ImportError)
        assert importlib.import_module(new).__name__ == new
    with pytest.raises(ModuleNotFoundError):  # a name that never existed is Python's own error
        importlib.import_module("safebunny.saga.nothing_here")


@pytest.mark.parametrize("old, new", [("safebunny.shim", "safebunny.spark.shim"),
                                      ("safebunny.source", "safebunny.queues"),
                                      ("safebunny.exactly_once.inbox.index", "safebunny.delta.seen_index"),
                                      ("pyspark_safebunny.stream_reader", "pyspark_safebunny.microbatch_reader")])
def test_a_module_that_moved_is_answered_with_its_new_place(old, new):
    with pytest.raises(SafeBunnyMovedError, match=rf"import {re.escape(new)} instead"):
        importlib.import_module(old)
    importlib.import_module(new)
    with pytest.raises(SafeBunnyMovedError, match=r"import safebunny\.queues"):  # a package's modules move with it
        importlib.import_module("safebunny.source.consumer")


def test_every_moved_module_has_a_place_and_no_old_name_is_importable():
    for old, new in MOVED.items():
        assert importlib.util.find_spec(new) is not None, new
        assert not old.startswith(new + "."), old
        with pytest.raises(SafeBunnyMovedError, match=f"{re.escape(old)} moved to {re.escape(new)}"):
            importlib.import_module(old)


def test_names_that_went_or_moved_raise_our_error_naming_the_new_form():
    with pytest.raises(SafeBunnyMovedError, match='format\\("safebunny"\\)'):
        safebunny.FORMAT  # noqa: B018
    with pytest.raises(SafeBunnyMovedError, match="SafeBunnyQueueReader"):
        from pyspark_safebunny.queue_reader import SafeBunnyQueueStreamReader  # noqa: F401
    with pytest.raises(SafeBunnyMovedError, match="SafeBunnyStreamQueuePartition"):
        from pyspark_safebunny.stream_queue_reader import SafeBunnyStreamPartition  # noqa: F401
    assert not hasattr(safebunny, "NoSuchName")


@pytest.mark.parametrize("module, name, new", [
    ("safebunny.saga.run.queries", "interval_ms", "safebunny.options.duration_ms"),
    ("safebunny.delta.spark_delta", "history_covers", "safebunny.delta.commit_tags"),
    ("safebunny.delta.spark_delta", "applied_in_history", "safebunny.delta.commit_tags"),
    ("safebunny.delta.spark_delta", "last_per_key_sql", "safebunny.delta.spark_sql"),
    ("safebunny.delta.spark_delta", "TXN_APP_CONF", "safebunny.delta.spark_commits"),
    ("safebunny.delta.spark_delta", "orphan_location", "safebunny.delta.spark_create"),
    ("safebunny.cli.run", "session", "safebunny.spark.session.run_session"),
    ("safebunny.saga.look.instance_state", "Parked", "safebunny.saga.look.parked.Parked")])
def test_a_name_that_moved_out_of_a_module_is_our_error_naming_where_it_is(module, name, new):
    imported = importlib.import_module(module)
    with pytest.raises(SafeBunnyMovedError, match=re.escape(new)):
        getattr(imported, name)
    with pytest.raises(AttributeError):
        imported.nothing_here  # noqa: B018
