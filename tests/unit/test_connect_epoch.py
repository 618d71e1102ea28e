"""A step's epoch over Spark Connect (pure logic; the Connect e2e tests run it in a real server)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from safebunny.errors import SafeBunnyError
from safebunny.exactly_once.protocol.epoch import checkpoint_epoch, connect_epoch, content_epoch
from safebunny.spark.session import is_connect


class _Frame:
    """What content_epoch uses of a Connect DataFrame: its columns and one column as Arrow."""

    def __init__(self, ids: list, columns: tuple[str, ...] = ("value", "messageId")) -> None:
        self.ids = ids
        self.columns = list(columns)

    def select(self, name: str) -> _Frame:
        assert name == "messageId"
        return self

    def toArrow(self) -> pa.Table:  # noqa: N802 - the DataFrame method
        return pa.table({"messageId": pa.array(self.ids, pa.string())})


def test_a_replayed_batch_has_the_same_epoch_and_another_batch_another():
    epoch = content_epoch(_Frame(["a", "b", "a"]), 3, "n")
    assert epoch.startswith("batch-")
    assert content_epoch(_Frame(["b", "a", "a"]), 3, "n") == epoch  # order within the batch does not matter
    assert content_epoch(_Frame(["a", "b"]), 3, "n") != epoch  # the copies count
    assert content_epoch(_Frame(["a", "b", "a"]), 4, "n") != epoch  # the batch id counts
    assert content_epoch(_Frame(["a", "c", "a"]), 3, "n") != epoch
    assert content_epoch(_Frame([None, "a"]), 0, "n") != content_epoch(_Frame(["", "a"]), 0, "n")
    assert content_epoch(_Frame([]), 0, "n") != content_epoch(_Frame([]), 1, "n")


def test_an_input_without_message_ids_asks_for_the_checkpoint():
    with pytest.raises(SafeBunnyError, match="checkpoint="):
        content_epoch(_Frame(["a"], columns=("value",)), 0, "billing")


def test_the_checkpoint_epoch_is_the_query_id_in_its_metadata(tmp_path):
    (tmp_path / "metadata").write_text('{"id":"8c1f0c3e-1111-2222-3333-444455556666"}\n')
    assert checkpoint_epoch(str(tmp_path), "n") == "8c1f0c3e-1111-2222-3333-444455556666"
    with pytest.raises(SafeBunnyError, match="checkpointLocation"):
        checkpoint_epoch(str(tmp_path / "elsewhere"), "n")
    (tmp_path / "metadata").write_text("not json")
    with pytest.raises(SafeBunnyError, match="no query id"):
        checkpoint_epoch(str(tmp_path), "n")


def test_the_order_checkpoint_then_explicit_then_content(tmp_path):
    (tmp_path / "metadata").write_text('{"id":"q1"}')
    frame = _Frame(["a"])
    assert connect_epoch(frame, 0, str(tmp_path), "fixed", "n") == "q1"
    assert connect_epoch(frame, 0, None, "fixed", "n") == "fixed"
    assert connect_epoch(frame, 0, None, None, "n") == content_epoch(frame, 0, "n")
    with pytest.raises(SafeBunnyError, match="outside a streaming query"):
        connect_epoch(None, None, None, None, "n")


def test_connect_sessions_are_told_apart_by_their_class():
    remote = type("SparkSession", (), {"__module__": "pyspark.sql.connect.session"})
    classic = type("SparkSession", (), {"__module__": "pyspark.sql.session"})
    assert is_connect(remote()) and not is_connect(classic())
