"""A step's whole exactly-once state on an S3-compatible object store (``moto_server``, no atomic rename): the
inbox, the effect tables, the claims, the outcome logs and the decision table. Spark's checkpoints stay local in
tests (hadoop-aws is not installable here); the library's own state does not touch the local disk."""

from __future__ import annotations

import json
import os
import threading

import pytest
from pyarrow import fs as pafs

import safebunny
from safebunny.delta.delta_rs import DeltaRsTarget
from safebunny.exactly_once.inbox.table import Inbox, InboxRow

SCHEMA = "messageId string, value binary, correlationId string"


class Crash(Exception):
    pass


def _batch(spark, ids):
    return spark.createDataFrame([(mid, json.dumps({"n": mid}).encode(), "c-1") for mid in ids], SCHEMA)


def _objects(uri: str) -> list[str]:
    filesystem, path = pafs.FileSystem.from_uri(uri)
    infos = filesystem.get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=True))
    return sorted(i.path for i in infos if i.type == pafs.FileType.File)


def test_a_step_with_its_state_on_s3_survives_a_crash_and_a_new_epoch_exactly_once(spark, s3_root, tmp_path,
                                                                                   monkeypatch):
    """A row handler (decisions recorded and committed) with a Delta effect, all on S3: the first epoch applies
    its effects and dies before its inbox marker; a new epoch applies nothing twice; and the driver's working
    directory gains no file."""
    workdir = tmp_path / "cwd"
    workdir.mkdir()
    monkeypatch.chdir(workdir)
    inbox, ledger = f"{s3_root}/inbox", f"{s3_root}/ledger"
    calls = {"n": 0}

    def decide(msg, ctx):
        calls["n"] += 1
        return safebunny.Outcome(effects=[safebunny.append({"orderId": msg["messageId"],
                                                            "answer": f"a{calls['n']}"}, ledger)])

    first = safebunny.Step(node="approve", inbox=inbox, settings=safebunny.StepSettings(epoch="E0"))

    def die(*args, **kwargs):
        raise Crash("the driver died before the inbox append")

    first.inbox.record = die  # type: ignore[method-assign]
    with pytest.raises(Crash):
        first.process(_batch(spark, ["m1", "m2", "m3"]), 2, decide, rows=True)
    assert any("/_claims/approve/" in p for p in _objects(inbox)), "the claim is on the object store"
    assert any("/_decisions/_delta_log/" in p for p in _objects(inbox)), "so are the committed decisions"
    second = safebunny.Step(node="approve", inbox=inbox, settings=safebunny.StepSettings(epoch="E1"))
    second.process(_batch(spark, ["m1", "m2", "m3", "m4"]), 0, decide, rows=True)
    rows = DeltaRsTarget(ledger).read().to_pylist()
    assert sorted(r["orderId"] for r in rows) == ["m1", "m2", "m3", "m4"], "each message once"
    assert {r["orderId"]: r["answer"] for r in rows}["m1"] == "a1", "the dead epoch's decision stands"
    assert not [p for p in _objects(inbox) if "/_claims/" in p], "the orphaned claim is retired"
    assert second.inbox.batch_done("E1", 0)
    assert sorted(os.listdir(workdir)) == [], "nothing written to the driver's working directory"


def test_two_writers_commit_to_the_shared_inbox_on_s3_at_once_and_keep_every_commit(s3_root):
    """Two nodes append their batch markers to one inbox table on S3 at the same moments: every commit survives
    (delta-rs commits there with a conditional put, never an unsafe rename)."""
    path = f"{s3_root}/inbox"
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def node(name: str) -> None:
        inbox = Inbox(path, name)
        try:
            start.wait(30)
            for batch in range(8):
                inbox.record([InboxRow(f"{name}-{batch}-{i}", None, None) for i in range(3)], "E", batch)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    threads = [threading.Thread(target=node, args=(n,)) for n in ("billing", "shipping")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors, errors
    for name in ("billing", "shipping"):
        inbox = Inbox(path, name)
        assert all(inbox.batch_done("E", b) for b in range(8)), f"every batch marker of {name} is in"
        assert inbox.rows().num_rows == 24, f"every row of {name} once"
