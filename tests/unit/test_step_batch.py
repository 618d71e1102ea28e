"""The step's batch on the driver: in-batch dedupe by source order, the inbox's seen ids left out,
causation ids read from headers, and the shapes the sink's checks see (pure pyarrow, no Spark)."""

import pyarrow as pa

from safebunny.amqp.sending import arrow_columns
from safebunny.exactly_once.collect.batch import STAND_IN_PREFIX, Batch
from safebunny.exactly_once.emits.routed_rows import PUBLISH_SCHEMA

HEADERS = pa.map_(pa.string(), pa.string())


def _batch(ids, headers=None):
    columns = {"value": pa.array([f"body-{i}".encode() for i in range(len(ids))], pa.binary()),
               "messageId": pa.array(ids, pa.string()),
               "correlationId": pa.array([f"c-{i}" for i in ids], pa.string()),
               "type": pa.array(["T"] * len(ids), pa.string())}
    if headers is not None:
        columns["headers"] = pa.array(headers, HEADERS)
    return Batch.of(pa.table(columns))


def test_the_first_copy_of_an_id_wins_in_source_order():
    batch = _batch(["b", "a", "b", "c", "a"])
    assert (batch.received, batch.distinct) == (5, 3)
    assert batch.first_ids() == ["b", "a", "c"]
    new = batch.new(set())
    assert new.ids == ["b", "a", "c"]
    assert new.table.column("value").to_pylist() == [b"body-0", b"body-1", b"body-3"]


def test_ids_the_inbox_has_seen_are_left_out():
    new = _batch(["m1", "m2", "m3", "m2"]).new({"m2"})
    assert new.ids == ["m1", "m3"]
    assert new.correlation_of() == {"m1": "c-m1", "m3": "c-m3"}
    assert new.types == ["T", "T"]
    assert _batch(["x"]).new({"x"}).count == 0


def test_causation_comes_from_the_header_and_is_none_without_one():
    new = _batch(["m1", "m2", "m3"], [[("x-causation-id", "up-1"), ("k", "v")], None, [("k", "v")]]).new(set())
    assert new.causations == ["up-1", None, None]
    assert _batch(["m1"]).new(set()).causations == [None]


def test_a_message_without_an_id_is_rejected_with_a_stand_in_id_not_the_batch():
    def batch(scope):
        return Batch.of(pa.table({"value": pa.array([b"a", b"same", b"b", b"same"], pa.binary()),
                                  "messageId": pa.array([None, None, "m1", None], pa.string()),
                                  "correlationId": pa.array([None, "c", "c1", None], pa.string())}), None, scope)

    new = batch("E/3").new(set())
    assert new.ids[2] == "m1" and all(mid.startswith(STAND_IN_PREFIX) for mid in new.ids[:2] + new.ids[3:])
    assert len(set(new.ids)) == 4  # two bodies alike, no id: two stand-ins, neither dropped as a duplicate
    assert new.ids == batch("E/3").new(set()).ids  # a replay gives the same stand-ins
    assert new.ids[0] != batch("E/4").new(set()).ids[0]  # another batch, another id
    assert set(new.rejected) == {new.ids[0], new.ids[1], new.ids[3]}
    assert new.rejected[new.ids[1]].error_type == "MalformedMessage"
    assert new.rejected[new.ids[1]].correlation_id == "c" and "no message_id" in new.rejected[new.ids[1]].reason
    assert new.for_handler().ids == ["m1"] and new.for_handler().table.num_rows == 1
    assert new.row_of(new.ids[3])["value"] == b"same"
    assert new.order == {mid: p for p, mid in enumerate(new.ids)}


def test_row_of_returns_the_whole_input_row():
    new = _batch(["m1", "m2"]).new(set())
    assert new.row_of("m2")["value"] == b"body-1"
    assert new.row_of("nope") is None


def test_publish_rows_have_the_columns_the_sink_accepts():
    assert arrow_columns(PUBLISH_SCHEMA) == {"value": "binary", "messageId": "string", "correlationId": "string",
                                             "causationId": "string", "type": "string", "exchange": "string",
                                             "routingKey": "string", "contentType": "string"}
    assert arrow_columns(pa.schema([("outputIndex", pa.int32()), ("headers", HEADERS)])) == {
        "outputIndex": "int", "headers": "map<string,string>"}


def _park(tmp_path, epoch, batch_id, parkings, mark=False):
    """Commit ``parkings`` (id -> record) as a saga step does (fenced, through its claims); ``mark``: then the
    batch's inbox marker (its copies were confirmed before it)."""
    from safebunny.exactly_once.claims.batch_claims import BatchClaims
    from safebunny.exactly_once.inbox.decisions import parking
    from safebunny.exactly_once.inbox.table import Inbox, InboxRow

    claims = BatchClaims("s", Inbox(str(tmp_path / "inbox"), "s"))
    ids = sorted(parkings)
    rounds = {mid: r.get("redriven") for mid, r in parkings.items()}
    committed = claims.commit_decisions(None, epoch, batch_id, ids, {m: parking(r) for m, r in parkings.items()},
                                        rounds)
    if mark:
        claims.inbox.record([InboxRow(m, "c", None, "failed", "x", 1, (), "T") for m in ids], epoch, batch_id)
        claims.release(epoch, batch_id, (True, []))
    return committed


def _parked_ids(tmp_path, legacy="s.parked.json"):
    from safebunny.saga.run.parked_ids import ParkedIds

    return ParkedIds(str(tmp_path / legacy), str(tmp_path / "inbox"), "s")


def test_a_fresh_copy_of_a_parked_id_is_skipped_and_a_retry_or_redrive_of_it_is_not(tmp_path):
    """A saga step's ``Step(skip=...)``: the parked ids' fresh copies, marked on the batch's Arrow rows, once the
    parking batch's marker is in (its copies were confirmed before it)."""
    from safebunny.saga.define.retry import ATTEMPT
    from safebunny.saga.run.parked_ids import REDRIVEN

    parked = _parked_ids(tmp_path)
    ids = ["p", "p", "p", "q", None, "p"]
    headers = [None, {ATTEMPT: "1"}, {REDRIVEN: "yes"}, None, None, {"other": "x"}]
    table = _batch(ids, headers).table
    assert parked.fresh_copies(table) is None  # nothing parked: nothing to skip
    unskipped = Batch.of(table, skip=parked.fresh_copies)
    assert (unskipped.table, unskipped.skipped) == (table, 0)
    _park(tmp_path, "E", 3, {"p": {"error_type": "ValueError", "reason": "boom", "attempt": 1, "redriven": None}})
    # committed, its copies not confirmed yet (a crash between the two): a fresh copy is parked again, not skipped
    assert parked.fresh_copies(table) is None
    _park(tmp_path, "E", 3, {"p": {"error_type": "ValueError", "reason": "boom", "attempt": 1, "redriven": None}},
          mark=True)  # the batch's replay: its own commit is in, nothing committed twice; then its marker
    assert parked.fresh_copies(table).to_pylist() == [True, False, False, False, False, True]
    batch = Batch.of(table, skip=parked.fresh_copies)
    kept, skipped = batch.table, batch.skipped
    assert skipped == 2 and kept.column("headers").to_pylist()[:2] == [[(ATTEMPT, "1")], [(REDRIVEN, "yes")]]
    assert kept.num_rows == 4


def test_a_committed_parking_rejects_every_copy_but_a_redriven_one_and_an_old_file_is_still_honoured(tmp_path):
    """Issue 48, item 3, and issue 58, item 1: a saga step's ``Step(parked=...)``, from the fenced decision table.
    A parking is honoured by any later copy of the message (a redelivery in another epoch, a retry tier's copy),
    whatever the handler would say now; a copy that redrive sent after the parking (another
    ``x-safebunny-redriven`` stamp) is decided afresh, and once that copy is parked in turn, its stamp is the one
    honoured; a second parking of one round never lands (the table's own read after the listing leaves it out)."""
    from safebunny.saga.define.retry import ATTEMPT
    from safebunny.saga.run.parked_ids import REDRIVEN

    parked = _parked_ids(tmp_path)
    ids = ["p", "p", "p", "q"]
    headers = [None, {ATTEMPT: "2"}, {REDRIVEN: "t1"}, None]
    table = _batch(ids, headers).table
    assert parked.recorded(table) == {}
    _park(tmp_path, "E", 1, {"p": {"error_type": "ServiceDown", "reason": "down", "attempt": 1, "redriven": None}},
          mark=True)
    (failed,) = parked.recorded(table.slice(1, 1)).values()  # the retry tier's copy
    assert (failed.message_id, failed.reason, failed.error_type) == ("p", "down", "ServiceDown")
    assert set(parked.recorded(table)) == {"p"} and parked.parkings({"p": "t1"}) == {}
    _park(tmp_path, "F", 0, {"p": {"error_type": "ServiceDown", "reason": "down again", "attempt": 1,
                                   "redriven": "t1"}}, mark=True)
    assert parked.parkings({"p": "t1"})["p"]["reason"] == "down again" and parked.parkings({"p": None})["p"][
        "reason"] == "down"
    later = _park(tmp_path, "G", 0, {"p": {"error_type": "Other", "reason": "later", "attempt": 3, "redriven": "t1"}})
    assert later["p"]["reason"] == "down again", "a committed parking is never redecided"
    assert parked.parkings({"p": "t1"})["p"]["reason"] == "down again"
    (tmp_path / "old.parked.json").write_text('["r"]')  # an old version's file: ids whose copies were confirmed
    legacy = _parked_ids(tmp_path, "old.parked.json")
    old = _batch(["r", "r"], [None, {ATTEMPT: "1"}]).table
    assert legacy.fresh_copies(old).to_pylist() == [True, False]
    assert legacy.recorded(old.slice(1, 1))["r"].reason  # parked again, with a reason saying where to look


def test_parkings_expire_with_their_own_retention_and_decisions_with_the_window(tmp_path):
    """``Inbox.maintain(parked_for=...)``: a saga keeps parkings as long as its poison queue keeps the messages
    (``poison_max_age``), its other decisions for the dedupe window."""
    import datetime as dt

    from safebunny.exactly_once.inbox.decisions import DecisionTable
    from safebunny.exactly_once.inbox.table import Inbox

    _park(tmp_path, "E", 1, {"p": {"error_type": "X", "reason": "r", "attempt": 1, "redriven": None}})
    table = DecisionTable(str(tmp_path / "inbox" / "_decisions"), "s")
    table._delta.append(table.rows({"a": {"ok": True}}, ["a"], "E", 2), "other", 1)
    inbox = Inbox(str(tmp_path / "inbox"), "s")
    now = dt.datetime.now(dt.timezone.utc)
    inbox.maintain(now + dt.timedelta(days=8), vacuum=False, parked_for=dt.timedelta(days=30))
    assert set(table.read(["a", "p"])) == {"p"}, "past the window: the decision goes, the parking stays"
    inbox.maintain(now + dt.timedelta(days=31), vacuum=False, parked_for=dt.timedelta(days=30))
    assert table.read(["p"]) == {}


def test_a_stand_in_id_is_the_position_in_the_batch_as_read_whatever_is_skipped():
    """A replay that skips more rows (a message parked before the crash) gives a message without an id the same
    stand-in id, so it is not parked a second time under another id."""
    table = _batch(["p", None]).table.set_column(1, "messageId", pa.array(["p", None], pa.string()))
    first = Batch.of(table, scope="e/1")
    replay = Batch.of(table, scope="e/1", skip=lambda t: pa.array([True, False]))
    assert replay.skipped == 1 and replay.received == 1
    assert replay.first_ids() == [first.first_ids()[1]] and replay.missing == first.missing
