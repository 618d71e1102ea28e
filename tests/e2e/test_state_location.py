"""No state on the driver's local disk outside the configured root: a saga run from a working directory of its
own writes nothing there (issue 37). Its claims, outcome logs, row decisions, journals, checkpoints, status and
pause files all live under the saga's root."""

from __future__ import annotations

import os
import uuid

import safebunny


def _listing(folder):
    return {os.path.relpath(os.path.join(d, n), folder) for d, dirs, files in os.walk(folder) for n in dirs + files}


def test_a_saga_writes_nothing_outside_its_root(spark, amqp_uri, tmp_path, monkeypatch):
    cwd, root = tmp_path / "cwd", tmp_path / "root"
    cwd.mkdir()
    (cwd / "notes.txt").write_text("the user's own file")
    monkeypatch.chdir(cwd)
    before, around = _listing(cwd), _listing(tmp_path)
    saga = safebunny.Saga(f"sbt-{uuid.uuid4().hex[:8]}", uri=amqp_uri, root=str(root), settings=safebunny.SagaSettings(
        retry=safebunny.Retry(delays=("1s",))))

    @saga.step("greeter", consumes="NameGiven", from_node="app", schema="name string", produces=["Greeted"])
    def greet(names, ctx):
        greetings = names.selectExpr("messageId", "concat('hello ', name) AS text")
        return safebunny.Outcome(effects=[safebunny.append(greetings, f"{root}/greetings")],
                                 emits=[safebunny.emit(greetings, type="Greeted")])

    @saga.step("printer", consumes="Greeted", from_node="greeter", schema="text string", rows=True)
    def record(msg, ctx):  # a row handler: its decisions go to the outcome log, the claims and the decision table
        return safebunny.Outcome(effects=[safebunny.append({"text": msg["text"]}, f"{root}/printed")])

    try:
        names = spark.createDataFrame([("ada",), ("grace",), ("ada",)], "name string")
        saga.start(names, node="app", type="NameGiven", business_key="name")
        saga.drain(spark, timeout=240)
        assert sorted(r.processed for r in saga.status()) == [2, 2]
    finally:
        safebunny.topology.delete(saga)
    assert _listing(cwd) == before, "nothing written to the driver's working directory"
    outside = {p for p in _listing(tmp_path) - around if not (p == "root" or p.startswith(f"root{os.sep}"))}
    assert outside == set(), "nothing written beside the root"
    written = _listing(root)
    for part in ("inbox/_delta_log", "inbox/_decisions/_delta_log", "checkpoints", "journal", "status"):
        assert any(p.startswith(part) for p in written), f"{part} is under the root"
