"""A batch of one epoch that applied its effects and never wrote its inbox marker, then the same messages in a
batch of another epoch (a new checkpoint): real Delta tables, a real broker and the shared SparkSession. The
crash is stood for by an inbox append that fails, so both epochs run in this process; test_step_crash.py kills
real drivers at the same points."""

from __future__ import annotations

import importlib
import json

import pytest

import safebunny
from safebunny.delta.delta_rs import DeltaRsTarget

takeover_module = importlib.import_module("safebunny.exactly_once.claims.takeover")
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

    first = safebunny.Step(node="approval", inbox=inbox, settings=safebunny.StepSettings(
            connection=safebunny.ConnectionSettings(amqp_uri), epoch="E0"))
    _fail_inbox_append(first)
    with pytest.raises(Crash):
        first.process(_batch(spark, ["m1", "m2"]), 4, decide, rows=True)
    assert len(DeltaRsTarget(ledger).read()) == 2, "the first epoch's effects are committed"

    second = safebunny.Step(node="approval", inbox=inbox, settings=safebunny.StepSettings(
            connection=safebunny.ConnectionSettings(amqp_uri), epoch="E1"))
    report = second.process(_batch(spark, ["m1", "m2", "m3"]), 0, decide, rows=True)
    rows = DeltaRsTarget(ledger).read().to_pylist()
    assert sorted(r["messageId"] for r in rows) == ["m1", "m2", "m3"], "each message once in the ledger"
    emitted = {json.loads(body)["orderId"]: json.loads(body)["decision"] for _, _, body in admin.get_all(out)}
    assert emitted == {r["orderId"]: r["decision"] for r in rows}, "the emits agree with the effects"
    assert report.processed == 3
    assert not list((tmp_path / "inbox" / "_claims").rglob("*.json")), "the orphaned claim is retired"


def test_a_dataframe_handler_applies_only_what_the_orphan_did_not(spark, amqp_uri, make_queue, admin, tmp_path):
    """The orphaned batch reached the append and not the merge: the new epoch merges its messages and appends
    only the message the orphan never claimed. The orphan's messages are merged as the orphan decided (its recorded
    outcome: rows saying E0), the new message as the new epoch does."""
    out = make_queue(suffix="-out")
    effects, ledger, inbox = str(tmp_path / "effects"), str(tmp_path / "ledger"), str(tmp_path / "inbox")

    def handle(df, ctx):
        rows = df.selectExpr("messageId", f"'{ctx.epoch}' AS epoch")
        return safebunny.Outcome(effects=[safebunny.append(rows, effects),
                                          safebunny.merge(rows, ledger, on="messageId")],
                                 emits=[safebunny.emit(rows, type="Done", routing_key=out)])

    first = safebunny.Step(node="ship", inbox=inbox, settings=safebunny.StepSettings(
            connection=safebunny.ConnectionSettings(amqp_uri), epoch="E0"))
    applied = []
    original = takeover_module.apply_effect

    def append_then_die(target, effect, table, app_id, version, *fence):
        if applied:
            raise Crash("the driver died between the two effects")
        applied.append(effect.kind)
        return original(target, effect, table, app_id, version, *fence)

    takeover_module.apply_effect = append_then_die
    try:
        with pytest.raises(Crash):
            first.process(_batch(spark, ["m1", "m2"]), 7, handle)
    finally:
        takeover_module.apply_effect = original
    assert applied == ["append"]

    second = safebunny.Step(node="ship", inbox=inbox, settings=safebunny.StepSettings(
            connection=safebunny.ConnectionSettings(amqp_uri), epoch="E1"))
    second.process(_batch(spark, ["m1", "m2", "m3"]), 0, handle)
    appended = sorted((r["messageId"], r["epoch"]) for r in DeltaRsTarget(effects).read().to_pylist())
    assert appended == [("m1", "E0"), ("m2", "E0"), ("m3", "E1")]
    merged = sorted((r["messageId"], r["epoch"]) for r in DeltaRsTarget(ledger).read().to_pylist())
    assert merged == [("m1", "E0"), ("m2", "E0"), ("m3", "E1")]
    assert len({p.message_id for _, p, _ in admin.get_all(out)}) == 3


def _claim_files(tmp_path):
    return list((tmp_path / "inbox" / "_claims").rglob("*.json"))


def test_a_row_that_failed_in_the_dead_epoch_is_applied_by_the_next(spark, amqp_uri, tmp_path):
    """Issue 35, case 1: a DataFrame handler's UDF fails one order while a service is down; the batch's other rows
    are applied, then the driver dies before its inbox marker; the service recovers and a new epoch gets the same
    messages. The failed order must be applied (once), the others not a second time."""
    from pyspark.sql.functions import udf

    ledger, inbox, down = str(tmp_path / "ledger"), str(tmp_path / "inbox"), tmp_path / "service-down"
    down.write_text("down")
    flag = str(down)

    @udf("string")
    def charge(mid):
        import os

        if mid == "m2" and os.path.exists(flag):
            raise ValueError("the payment service is down")
        return "charged"

    def handle(df, ctx):
        return safebunny.Outcome(effects=[safebunny.append(
            df.select("messageId", charge("messageId").alias("status")), ledger)])

    first = safebunny.Step(node="charge", inbox=inbox, settings=safebunny.StepSettings(epoch="E0"))
    _fail_inbox_append(first)
    with pytest.raises(Crash):
        first.process(_batch(spark, ["m1", "m2", "m3"]), 3, handle)
    assert sorted(r["messageId"] for r in DeltaRsTarget(ledger).read().to_pylist()) == ["m1", "m3"]

    down.unlink()  # the service is back
    second = safebunny.Step(node="charge", inbox=inbox, settings=safebunny.StepSettings(epoch="E1"))
    report = second.process(_batch(spark, ["m1", "m2", "m3"]), 0, handle)
    assert sorted(r["messageId"] for r in DeltaRsTarget(ledger).read().to_pylist()) == ["m1", "m2", "m3"], \
        "the order that failed in the dead epoch is applied once, the others are not applied again"
    assert report.processed == 3 and report.failed == 0
    assert not _claim_files(tmp_path), "the orphaned claim is retired once its ids are done"


def test_a_failed_decision_of_the_dead_epoch_is_decided_again(spark, amqp_uri, make_queue, admin, tmp_path):
    """Issue 35, case 1 for row handlers: the dead epoch's *failed* decision is not reused (it applied and sent
    nothing); the message is decided again now that the service answers, and applied once."""
    out = make_queue(suffix="-out")
    ledger, inbox = str(tmp_path / "ledger"), str(tmp_path / "inbox")
    service = {"up": False}

    def decide(msg, ctx):
        if msg["messageId"] == "m2" and not service["up"]:
            raise ConnectionError("the service is down")
        row = {"orderId": msg["messageId"], "decision": "approved"}
        return safebunny.Outcome(effects=[safebunny.append(row, ledger)],
                                 emits=[safebunny.emit(row, type="Approved", routing_key=out)])

    first = safebunny.Step(node="approve", inbox=inbox, settings=safebunny.StepSettings(
        connection=safebunny.ConnectionSettings(amqp_uri), epoch="E0", row_retries=0))
    _fail_inbox_append(first)
    with pytest.raises(Crash):
        first.process(_batch(spark, ["m1", "m2"]), 1, decide, rows=True)
    service["up"] = True
    second = safebunny.Step(node="approve", inbox=inbox, settings=safebunny.StepSettings(
        connection=safebunny.ConnectionSettings(amqp_uri), epoch="E1", row_retries=0))
    report = second.process(_batch(spark, ["m1", "m2"]), 0, decide, rows=True)
    assert sorted(r["messageId"] for r in DeltaRsTarget(ledger).read().to_pylist()) == ["m1", "m2"]
    assert report.failed == 0 and report.processed == 2
    assert sorted({json.loads(body)["orderId"] for _, _, body in admin.get_all(out)}) == ["m1", "m2"]


def test_an_emit_only_row_step_takes_one_branch_per_instance(spark, amqp_uri, make_queue, admin, tmp_path):
    """Issue 35, case 2: a row handler with no Delta effect (a payment step: it calls a service and emits
    Charged or Declined) dies after its publish, before its inbox marker; the service's answer then changes.
    The new epoch must reuse the recorded decisions: every instance ends in exactly one branch."""
    out = make_queue(suffix="-out")
    inbox = str(tmp_path / "inbox")
    answer = {"value": "Charged"}

    def pay(msg, ctx):
        return safebunny.Outcome(emits=[safebunny.emit({"orderId": msg["messageId"]}, type=answer["value"],
                                                       routing_key=out)])

    ids = [f"o{i}" for i in range(8)]
    first = safebunny.Step(node="payment", inbox=inbox, settings=safebunny.StepSettings(
            connection=safebunny.ConnectionSettings(amqp_uri), epoch="E0"))
    _fail_inbox_append(first)
    with pytest.raises(Crash):
        first.process(_batch(spark, ids), 5, pay, rows=True)
    assert _claim_files(tmp_path), "an emit-only row batch records which decisions it took"
    answer["value"] = "Declined"  # the service answers differently now
    second = safebunny.Step(node="payment", inbox=inbox, settings=safebunny.StepSettings(
            connection=safebunny.ConnectionSettings(amqp_uri), epoch="E1"))
    second.process(_batch(spark, ids), 0, pay, rows=True)
    branches: dict[str, set[str]] = {}
    for _, props, body in admin.get_all(out):
        branches.setdefault(json.loads(body)["orderId"], set()).add(props.type)
    assert branches == {mid: {"Charged"} for mid in ids}, "one branch per instance: the first decision"
    assert not _claim_files(tmp_path)


def test_a_claim_older_than_the_window_still_protects_its_effects(spark, amqp_uri, tmp_path):
    """Issue 35, case 4: a dead batch's claim older than the dedupe window (its messages stayed queued through a
    long outage or a paused step) must still keep the next epoch from applying its effects again."""
    ledger, inbox = str(tmp_path / "ledger"), str(tmp_path / "inbox")

    def handle(df, ctx):
        return safebunny.Outcome(effects=[safebunny.append(df.select("messageId"), ledger)])

    first = safebunny.Step(node="keep", inbox=inbox, settings=safebunny.StepSettings(epoch="E0"))
    _fail_inbox_append(first)
    with pytest.raises(Crash):
        first.process(_batch(spark, ["m1", "m2"]), 2, handle)
    [claim] = _claim_files(tmp_path)
    raw = json.loads(claim.read_text())
    raw["writtenAt"] = 0.0  # written in 1970: far older than any window
    claim.write_text(json.dumps(raw))
    second = safebunny.Step(node="keep", inbox=inbox, settings=safebunny.StepSettings(epoch="E1"))
    second.process(_batch(spark, ["m1", "m2"]), 0, handle)
    assert sorted(r["messageId"] for r in DeltaRsTarget(ledger).read().to_pylist()) == ["m1", "m2"]


def _run_in_thread(spark, work):
    """Run ``work()`` in a thread of its own (a second driver's batch); returns (thread, errors)."""
    import threading

    errors: list[BaseException] = []

    def target():
        from pyspark.sql import SparkSession

        SparkSession._activeSession = spark  # noqa: SLF001 - the thread's active session, as a driver has
        try:
            work()
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, errors


@pytest.mark.parametrize("both_see", [False, True], ids=["zombie-plans-first", "each-sees-the-other"])
def test_two_live_batches_on_the_same_messages_apply_each_effect_once(spark, amqp_uri, tmp_path, both_see):
    """Issue 35, case 3: two drivers hold the same messages at once (a replay from the journal beside the standby
    the broker gave them to, a handover mid-batch, a partition). Batch A of epoch EA and batch B of epoch EB run
    side by side on one inbox and one effect table:

    - zombie-plans-first: A lists the claims (B has none yet) and stops before its commit; B then runs to its end
      (it sees A's claim, fences A in its own commit); A's commit is refused and A plans again: nothing left;
    - each-sees-the-other: both claims are on file before either lists, so each fences the other; the commits
      name both app ids and only one lands; the other batch plans again and leaves the ids out.
    """
    import threading

    ledger, inbox = str(tmp_path / "ledger"), str(tmp_path / "inbox")
    ids = [f"m{i}" for i in range(6)]

    def handle(df, ctx):
        return safebunny.Outcome(effects=[safebunny.append(df.selectExpr("messageId", f"'{ctx.epoch}' AS epoch"),
                                                           ledger)])

    a_ready, b_may_commit, a_may_go = threading.Event(), threading.Event(), threading.Event()
    original = takeover_module.apply_effect
    original_apply = takeover_module.Takeover.apply

    def apply_effect(target, effect, table, app_id, version, *fence):
        if ".EA." in app_id and not a_may_go.is_set():  # A has planned; it commits once B is done
            a_ready.set()
            assert a_may_go.wait(120)
        return original(target, effect, table, app_id, version, *fence)

    def plan_after_both_claims(self, effects, orphans, late_done, pins=None, histories=None):
        if self.epoch == "EB" and both_see:
            b_may_commit.set()
        if both_see and self.epoch == "EA":  # A lists only once B's claim is on file too
            assert b_may_commit.wait(120)
            orphans = step_a._claimed._orphans("EA", 1)  # noqa: SLF001 - A's listing after B's claim was written
        return original_apply(self, effects, orphans, late_done, pins, histories)

    # the fence alone (outcomes not recorded): each row's epoch says which batch computed and applied it
    step_a = safebunny.Step(node="ship", inbox=inbox, settings=safebunny.StepSettings(epoch="EA",
                                                                                   record_frame_outcomes=False))
    step_b = safebunny.Step(node="ship", inbox=inbox, settings=safebunny.StepSettings(epoch="EB",
                                                                                   record_frame_outcomes=False))
    takeover_module.apply_effect = apply_effect
    takeover_module.Takeover.apply = plan_after_both_claims
    try:
        thread, errors = _run_in_thread(spark, lambda: step_a.process(_batch(spark, ids), 1, handle))
        if both_see:
            # B's claim is written while A waits for it; B then plans (seeing A's) and commits first
            b_done = threading.Event()

            def release_a_after_b():
                assert b_done.wait(240)
                a_may_go.set()
            threading.Thread(target=release_a_after_b, daemon=True).start()
            step_b.process(_batch(spark, ids), 0, handle)
            b_done.set()
        else:
            assert a_ready.wait(120), "A planned and reached its commit"
            step_b.process(_batch(spark, ids), 0, handle)
            a_may_go.set()
        thread.join(240)
    finally:
        takeover_module.apply_effect = original
        takeover_module.Takeover.apply = original_apply
    assert not errors, errors
    rows = DeltaRsTarget(ledger).read().to_pylist()
    assert sorted(r["messageId"] for r in rows) == ids, "each message applied once, by one of the two batches"
    assert {r["epoch"] for r in rows} == {"EB"}, "B's commit landed first; A's was refused and left them out"
    assert not _claim_files(tmp_path)


def test_two_live_row_batches_deciding_differently_take_one_branch(spark, amqp_uri, make_queue, admin, tmp_path):
    """Issue 35, cases 2 and 3 together: an emit-only row step (a payment service) runs on two drivers holding the
    same messages; the service answers A "Charged" and B "Declined". A decides first and stops before committing
    its decisions; B decides, commits (fencing A) and publishes; A's commit is refused, and A adopts B's committed
    decisions: every instance gets one branch only, B's."""
    import threading

    out = make_queue(suffix="-out")
    inbox = str(tmp_path / "inbox")
    ids = [f"o{i}" for i in range(5)]

    def pay_as(answer):
        def pay(msg, ctx):
            return safebunny.Outcome(emits=[safebunny.emit({"orderId": msg["messageId"]}, type=answer,
                                                           routing_key=out)])
        return pay

    a_ready, a_may_go = threading.Event(), threading.Event()

    step_a = safebunny.Step(node="payment", inbox=inbox, settings=safebunny.StepSettings(
            connection=safebunny.ConnectionSettings(amqp_uri), epoch="EA"))
    step_b = safebunny.Step(node="payment", inbox=inbox, settings=safebunny.StepSettings(
            connection=safebunny.ConnectionSettings(amqp_uri), epoch="EB"))
    write_claim = step_a._claimed.claims.write

    def claim_after_b(*args, **kwargs):  # A has decided; its claim comes after B's whole batch
        if not a_may_go.is_set():
            a_ready.set()
            assert a_may_go.wait(120)
        return write_claim(*args, **kwargs)

    step_a._claimed.claims.write = claim_after_b
    try:
        thread, errors = _run_in_thread(spark, lambda: step_a.process(_batch(spark, ids), 3, pay_as("Charged"),
                                                                      rows=True))
        assert a_ready.wait(120), "A decided and reached its decisions' commit"
        step_b.process(_batch(spark, ids), 0, pay_as("Declined"), rows=True)
        a_may_go.set()
        thread.join(240)
    finally:
        step_a._claimed.claims.write = write_claim
    assert not errors, errors
    branches: dict[str, set[str]] = {}
    for _, props, body in admin.get_all(out):
        branches.setdefault(json.loads(body)["orderId"], set()).add(props.type)
    assert set(branches) == set(ids) and all(len(types) == 1 for types in branches.values()), \
        f"one branch per instance: {branches}"
    assert {t for types in branches.values() for t in types} == {"Declined"}, \
        "A's decisions never reached B's listing, so B's committed first and A adopted them"
    assert not _claim_files(tmp_path)


@pytest.mark.parametrize("resume_at", ["plan", "commit"])
def test_a_batch_fenced_while_it_stalled_between_two_tables_resumes_without_applying_again(spark, amqp_uri,
                                                                                          tmp_path, resume_at):
    """Issue 48, case 1 (the zombie): batch A of epoch EA commits its first table, then stalls (a GC pause, a slow
    store); batch B of epoch EB gets the same messages (the broker moved the shard), sees A's claim, leaves A's ids
    out of the first table, fences A out of the second, applies there, marks and releases A's claim. A resumes with
    the claims it listed before the stall: it must not apply its ids to the second table again. ``resume_at``: A
    stalls after its first commit, before planning the second table; or after planning it, before its commit."""
    import threading

    first, second, inbox = str(tmp_path / "t1"), str(tmp_path / "t2"), str(tmp_path / "inbox")
    ids = [f"m{i}" for i in range(5)]

    def handle(df, ctx):
        rows = df.selectExpr("messageId", f"'{ctx.epoch}' AS epoch")
        return safebunny.Outcome(effects=[safebunny.append(rows, first), safebunny.append(rows, second)])

    stalled, resume = threading.Event(), threading.Event()
    original = takeover_module.apply_effect

    def apply_effect(target, effect, table, app_id, version, *fence):
        if ".EA." in app_id and resume_at == "commit" and effect.table.endswith("t2") and not resume.is_set():
            stalled.set()
            assert resume.wait(120)
        written = original(target, effect, table, app_id, version, *fence)
        if ".EA." in app_id and resume_at == "plan" and effect.table.endswith("t1"):
            stalled.set()
            assert resume.wait(120)
        return written

    # the fence alone (outcomes not recorded): each row's epoch says which batch computed and applied it
    step_a = safebunny.Step(node="ship", inbox=inbox, settings=safebunny.StepSettings(epoch="EA",
                                                                                   record_frame_outcomes=False))
    step_b = safebunny.Step(node="ship", inbox=inbox, settings=safebunny.StepSettings(epoch="EB",
                                                                                   record_frame_outcomes=False))
    takeover_module.apply_effect = apply_effect
    try:
        thread, errors = _run_in_thread(spark, lambda: step_a.process(_batch(spark, ids), 1, handle))
        assert stalled.wait(120), "A committed its first table and stalled"
        step_b.process(_batch(spark, ids), 0, handle)
        assert not _claim_files(tmp_path), "B released A's claim: its ids are all done"
        resume.set()
        thread.join(240)
    finally:
        takeover_module.apply_effect = original
    assert not errors, errors
    for table, by in ((first, {"EA"}), (second, {"EB"})):
        rows = DeltaRsTarget(table).read().to_pylist()
        assert sorted(r["messageId"] for r in rows) == ids, f"each message once in {table}"
        assert {r["epoch"] for r in rows} == by
