"""A batch of one epoch that applied its effects and never wrote its inbox marker, then the same messages in a
batch of another epoch (a new checkpoint): real Delta tables, a real broker and the shared SparkSession. The
crash is stood for by an inbox append that fails, so both epochs run in this process; test_step_crash.py kills
real drivers at the same points."""

from __future__ import annotations

import importlib
import json

import pytest

import safebunny
from safebunny.exactly_once.delta_rs import DeltaPath

step_module = importlib.import_module("safebunny.exactly_once.step")
SCHEMA = "messageId string, value binary, correlationId string"


class Crash(Exception):
    pass


def _fail_inbox_append(step: safebunny.Step) -> None:
    def record(*args, **kwargs):
        raise Crash("the driver died before the inbox append")

    step.inbox.record = record  # type: ignore[method-assign]


def _batch(spark, ids):
    return spark.createDataFrame([(mid, json.dumps({"n": mid}).encode(), "c-1") for mid in ids], SCHEMA)


def test_a_row_handler_keeps_the_orphaned_epochs_decisions(spark, amqp_uri, make_queue, admin, tmp_path):
    """A row handler that answers differently each call (a service): the new epoch must not apply or emit a
    second, different decision for a message whose first decision is in the effect table already."""
    out = make_queue(suffix="-out")
    ledger, inbox = str(tmp_path / "ledger"), str(tmp_path / "inbox")
    calls = {"n": 0}

    def decide(msg, ctx):
        calls["n"] += 1
        decision = {"orderId": msg["messageId"], "decision": f"answer-{calls['n']}"}
        return safebunny.Outcome(effects=[safebunny.append(decision, ledger)],
                                 emits=[safebunny.emit(decision, type="Decided", routing_key=out)])

    first = safebunny.Step(node="approval", inbox=inbox, uri=amqp_uri, epoch="E0")
    _fail_inbox_append(first)
    with pytest.raises(Crash):
        first.process(_batch(spark, ["m1", "m2"]), 4, decide, rows=True)
    assert len(DeltaPath(ledger).read()) == 2, "the first epoch's effects are committed"

    second = safebunny.Step(node="approval", inbox=inbox, uri=amqp_uri, epoch="E1")
    report = second.process(_batch(spark, ["m1", "m2", "m3"]), 0, decide, rows=True)
    rows = DeltaPath(ledger).read().to_pylist()
    assert sorted(r["messageId"] for r in rows) == ["m1", "m2", "m3"], "each message once in the ledger"
    emitted = {json.loads(body)["orderId"]: json.loads(body)["decision"] for _, _, body in admin.get_all(out)}
    assert emitted == {r["orderId"]: r["decision"] for r in rows}, "the emits agree with the effects"
    assert report.processed == 3
    assert not list((tmp_path / "inbox" / "_claims").rglob("*.json")), "the orphaned claim is retired"


def test_a_dataframe_handler_applies_only_what_the_orphan_did_not(spark, amqp_uri, make_queue, admin, tmp_path):
    """The orphaned batch reached the append and not the merge: the new epoch merges its messages and appends
    only the message the orphan never claimed."""
    out = make_queue(suffix="-out")
    effects, ledger, inbox = str(tmp_path / "effects"), str(tmp_path / "ledger"), str(tmp_path / "inbox")

    def handle(df, ctx):
        rows = df.selectExpr("messageId", f"'{ctx.epoch}' AS epoch")
        return safebunny.Outcome(effects=[safebunny.append(rows, effects),
                                          safebunny.merge(rows, ledger, on="messageId")],
                                 emits=[safebunny.emit(rows, type="Done", routing_key=out)])

    first = safebunny.Step(node="ship", inbox=inbox, uri=amqp_uri, epoch="E0")
    applied = []
    original = step_module.apply_effect

    def append_then_die(spark_, effect, table, app_id, version):
        if applied:
            raise Crash("the driver died between the two effects")
        applied.append(effect.kind)
        return original(spark_, effect, table, app_id, version)

    step_module.apply_effect = append_then_die
    try:
        with pytest.raises(Crash):
            first.process(_batch(spark, ["m1", "m2"]), 7, handle)
    finally:
        step_module.apply_effect = original
    assert applied == ["append"]

    second = safebunny.Step(node="ship", inbox=inbox, uri=amqp_uri, epoch="E1")
    second.process(_batch(spark, ["m1", "m2", "m3"]), 0, handle)
    appended = sorted((r["messageId"], r["epoch"]) for r in DeltaPath(effects).read().to_pylist())
    assert appended == [("m1", "E0"), ("m2", "E0"), ("m3", "E1")]
    merged = sorted((r["messageId"], r["epoch"]) for r in DeltaPath(ledger).read().to_pylist())
    assert merged == [("m1", "E1"), ("m2", "E1"), ("m3", "E1")]
    assert len({p.message_id for _, p, _ in admin.get_all(out)}) == 3
