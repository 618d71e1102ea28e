"""The exactly-once step's pure parts: emitted ids, bisection, the Spark Delta SQL; and the inbox on real
delta-rs tables (no broker, no JVM)."""

import datetime as dt
import os
import time

import orjson
import pyarrow as pa
import pytest

import safebunny
from safebunny.delta.commit_tags import applied_in_history, commit_tag, lock_in_history
from safebunny.delta.delta_rs import sweep_staging_files
from safebunny.delta.spark_create import orphan_location
from safebunny.delta.spark_sql import merge_sql, name_parts, qualified_name, quote_name
from safebunny.errors import SafeBunnyError, SafeBunnyOptionError
from safebunny.exactly_once.emits.routed_rows import build_publish_rows
from safebunny.exactly_once.handlers.frame_handler import bisect
from safebunny.exactly_once.inbox.table import Inbox, InboxRow


def _publish(rows, **kw):
    return build_publish_rows(pa.Table.from_pylist(rows), node="billing", message_type="Invoice", exchange="",
                              routing_key="q", correlation_of={"m1": "c1"}, what="emit #0", **kw)


def test_emitted_ids_come_from_the_cause_and_the_data_not_the_order():
    a, ids_a = _publish([{"messageId": "m1", "n": 1}, {"messageId": "m1", "n": 2}, {"messageId": "m2", "n": 3}])
    b, ids_b = _publish([{"messageId": "m2", "n": 3}, {"messageId": "m1", "n": 2}, {"messageId": "m1", "n": 1}])
    assert ids_a == {k: ids_b[k] for k in ids_a}
    assert set(ids_a["m2"]) == {safebunny.message_id("m2", "billing", "Invoice", 0)}
    row = a.to_pylist()[0]
    assert row["correlationId"] == "c1" and row["causationId"] == "m1" and orjson.loads(row["value"]) in (
        {"n": 1}, {"n": 2})
    assert a.to_pylist()[2]["correlationId"] == "m2"  # no correlation id known: the cause's id


def test_an_explicit_output_index_wins_and_must_be_unique():
    _, ids = _publish([{"messageId": "m1", "outputIndex": 7, "value": "x"}])
    assert ids["m1"] == [safebunny.message_id("m1", "billing", "Invoice", 7)]
    with pytest.raises(SafeBunnyOptionError, match="share an outputIndex"):
        _publish([{"messageId": "m1", "outputIndex": 1, "value": "x"}, {"messageId": "m1", "outputIndex": 1,
                                                                         "value": "y"}])


def test_an_emit_without_message_id_names_it():
    with pytest.raises(SafeBunnyOptionError, match="emit #0 has no 'messageId'"):
        _publish([{"orderId": "o1"}])


def test_bisection_isolates_the_failing_keys_within_the_budget():
    bad = {3, 11}

    def run(keys):
        if bad & set(keys):
            raise ValueError(f"bad {sorted(bad & set(keys))}")
        return list(keys)

    out = bisect(list(range(16)), run, max_jobs=64)
    assert set(out.failed) == bad and sorted(k for r in out.results for k in r) == sorted(set(range(16)) - bad)
    tight = bisect(list(range(16)), run, max_jobs=3)
    assert bad <= set(tight.failed) and "isolation budget" in next(iter(tight.failed.values()))[1]


def test_plan_errors_are_not_isolated():
    def run(keys):
        raise KeyError("no such column")

    with pytest.raises(KeyError):
        bisect([1, 2], run, fatal=lambda exc: isinstance(exc, KeyError))


def test_spark_delta_sql_quotes_names():
    assert quote_name("main.sb.in`box") == "`main`.`sb`.`in``box`"
    assert merge_sql("main.sb.orders", "src", ["orderId", "sku"]) == (
        "MERGE INTO `main`.`sb`.`orders` AS t USING `src` AS s ON t.`orderId` = s.`orderId` AND t.`sku` = s.`sku` "
        "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *")


def test_inbox_dedupes_within_the_window_and_excludes_its_own_batch(tmp_path):
    inbox = Inbox(str(tmp_path / "inbox"), "billing", window=dt.timedelta(days=7))
    other = Inbox(str(tmp_path / "inbox"), "shipping")
    now = dt.datetime(2026, 11, 22, tzinfo=dt.timezone.utc)
    assert inbox.record([InboxRow("a", "c", None), InboxRow("b", "c", None, "failed", "boom")], "E1", 0, now=now)
    assert not inbox.record([InboxRow("a", "c", None)], "E1", 0, now=now)  # a replay of the marker: no-op
    assert other.record([InboxRow("z", "c", None)], "E1", 0, now=now)
    assert inbox.batch_done("E1", 0) and not inbox.batch_done("E1", 1) and not inbox.batch_done("E2", 0)
    assert inbox.seen(["a", "b", "z"], "E1", 1, now=now) == {"a"}  # failed rows are not processed; other nodes
    assert inbox.seen(["a"], "E1", 0, now=now) == set()  # the batch's own rows do not count against it
    assert inbox.seen(["a"], "E1", 1, now=now + dt.timedelta(days=8)) == set()  # outside the window
    assert len(inbox.rows("c", all_nodes=True)) == 3


def test_maintain_drops_old_partitions_and_sweeps_staging_files(tmp_path):
    path = str(tmp_path / "inbox")
    inbox = Inbox(path, "billing", window=dt.timedelta(days=7))
    old = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    inbox.record([InboxRow("old", None, None)], "E", 0, now=old)
    inbox.record([InboxRow("new", None, None)], "E", 1, now=old + dt.timedelta(days=30))
    stale = os.path.join(path, "part-0001.parquet#1")
    open(stale, "w").close()
    os.utime(stale, (time.time() - 7200, time.time() - 7200))
    done = inbox.maintain(now=old + dt.timedelta(days=30))
    assert done["deleted"] == 1 and done["swept"] == 1 and not os.path.exists(stale)
    assert [r["messageId"] for r in inbox.rows().to_pylist()] == ["new"]
    assert sweep_staging_files(path) == 0


def test_maintain_keeps_each_nodes_own_window(tmp_path):
    """Two nodes share an inbox; maintaining one with its 7-day window leaves the other's rows (30 days) alone."""
    path = str(tmp_path / "inbox")
    short = Inbox(path, "billing", window=dt.timedelta(days=7))
    long = Inbox(path, "it's long", window=dt.timedelta(days=30))
    start = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    short.record([InboxRow("b-old", None, None)], "E", 0, now=start)
    long.record([InboxRow("l-old", None, None)], "E", 0, now=start)
    later = start + dt.timedelta(days=10)
    assert short.maintain(now=later)["deleted"] == 1
    assert long.maintain(now=later)["deleted"] == 0
    assert [r["messageId"] for r in long.rows().to_pylist()] == ["l-old"] and not short.rows().num_rows
    assert long.maintain(now=start + dt.timedelta(days=31))["deleted"] == 1


def test_maintain_deletes_a_nodes_row_decisions_older_than_its_window(tmp_path):
    from safebunny.exactly_once.inbox.decisions import DecisionTable

    path = str(tmp_path / "inbox")
    start = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    decisions = Inbox(path, "billing").decisions  # the inbox's folder, as its state location
    assert decisions == f"{path}/_decisions" and Inbox("main.sagas.inbox", "b", state=path).decisions == (
        "main.sagas.inbox_decisions")  # by name beside an inbox by name
    billing, other = DecisionTable(decisions, "billing"), DecisionTable(decisions, "other")
    decision = {"ok": True, "effects": [], "emits": []}
    for table in (billing, other):
        rows = table.rows({"m1": decision}, ["m1"], "E", 0, today=start.date())
        table._delta.append(rows, f"t.{table.node}", 1)  # noqa: SLF001 - a row as a step commits it
    assert billing.read(["m1"]) == {"m1": decision}
    done = Inbox(path, "billing", window=dt.timedelta(days=7)).maintain(now=start + dt.timedelta(days=8))
    assert done["decisions"] == 1 and billing.read(["m1"]) == {} and other.read(["m1"]) == {"m1": decision}


def test_a_spark_delta_effect_is_applied_when_the_history_holds_its_tag_at_that_version_or_later():
    """Issue 35, case 5: the orphan check of a table by name reads ``userMetadata`` from DESCRIBE HISTORY."""
    app = "safebunny.effect.ship.E0.abc"
    history = [None, "someone else's note", commit_tag(app, 3), commit_tag(app + "x", 9)]
    assert applied_in_history(history, app, 3) and applied_in_history(history, app, 2)
    assert not applied_in_history(history, app, 4), "a later batch of that epoch was never committed"
    assert not applied_in_history(history, "safebunny.effect.ship.E0.ab", 1), "a prefix of another app id"
    assert not applied_in_history([], app, 0)


def test_a_lock_version_is_the_highest_its_tags_hold_and_unknown_where_cleanup_removed_them():
    """Issue 47, item 3: a commit by name carries the step's lock; its version is read from the commits' tags."""
    app, lock = "safebunny.fx.ship.E0.abc", "safebunny.lock.ship.abc"
    tagged = [(0, 0, None), (1, 0, commit_tag(app, 3, (lock, 1))), (2, 0, commit_tag(app, 5, (lock, 4))),
              (3, 0, commit_tag(app + "x", 9, (lock + "x", 7))), (4, 0, "someone else's note")]
    assert lock_in_history(tagged, lock, "t") == 4
    assert applied_in_history([t for _v, _at, t in tagged], app, 5), "the tag names the batch's own app too"
    assert lock_in_history(tagged[:1] + tagged[3:], lock, "t") is None, "never committed: the history is whole"
    assert lock_in_history([], lock, "t") is None, "no table yet"
    assert lock_in_history(tagged[2:], lock, "t") == 4, "cleanup keeps the newest entries: the last lock is there"
    with pytest.raises(SafeBunnyError, match="delta.logRetentionDuration"):
        lock_in_history(tagged[3:], lock, "main.shop.ledger")  # cut, and no commit of the lock left: unknown


def test_a_table_name_is_qualified_as_the_catalog_resolves_it_whatever_its_spelling():
    spelled = ["effects", "db.effects", "spark_catalog.db.effects", "`spark_catalog`.`db`.`effects`", "DB.Effects"]
    assert {qualified_name(name_parts(name), "spark_catalog", "db") for name in spelled} == {"spark_catalog.db.effects"}
    assert qualified_name(name_parts("shop.t"), "main", "default") == qualified_name(name_parts("main.shop.t"), "x",
                                                                                     "y")
    assert name_parts("c.`a.b`.`t`` x`") == ["c", "a.b", "t` x"] and name_parts("sb.in`box") == ["sb", "in`box"]
    assert qualified_name(["c", "a.b", "t"], "x", "y") == "c.`a.b`.t"
    for bad in ("db..t", "`db.t", ""):
        with pytest.raises(SafeBunnyOptionError, match="not a name Spark reads"):
            name_parts(bad)


def test_the_location_of_a_create_cut_short_is_read_from_deltas_refusal():
    refusal = ("[DELTA_CREATE_TABLE_WITH_NON_EMPTY_LOCATION] Cannot create table ('`spark_catalog`.`db`.`t`'). The "
               "associated location ('file:/tmp/wh/db.db/t') is not empty and also not a Delta table.")
    assert orphan_location(refusal) == "file:/tmp/wh/db.db/t"
    assert orphan_location("[DELTA_CREATE_TABLE_WITH_NON_EMPTY_LOCATION] elsewhere") == ""
    assert orphan_location("[TABLE_OR_VIEW_NOT_FOUND] db.t") is None
