"""Issue 48, case 1 with the real claim folder, inbox and Delta tables (delta-rs, no Spark): a batch stalled after
its first effect commit (the stall hook, :mod:`safebunny.crashpoints`) while another epoch's batch fences it out
of the second table and finishes; once released, it applies nothing twice."""

from __future__ import annotations

import threading
import time

import pyarrow as pa

from safebunny import crashpoints
from safebunny.delta.delta_rs import DeltaRsTarget
from safebunny.exactly_once.claims.batch_claims import BatchClaims
from safebunny.exactly_once.inbox.table import Inbox, InboxRow
from safebunny.exactly_once.outcome import Effect

IDS = [f"m{i}" for i in range(4)]


def _run(claims: BatchClaims, effects, epoch: str, batch_id: int) -> None:
    """One batch's steps 4 and 6 as Step runs them: claim, apply beside the other claims, mark, release."""
    per_target = {key: set(IDS) for key in effects}
    claims.claims.write(epoch, batch_id, [], per_target)
    orphans, _met = claims.apply(None, epoch, batch_id, IDS, {k: (e, t(epoch)) for k, (e, t) in effects.items()})
    claims.inbox.record([InboxRow(mid, "c", None, "done", None, 1, (), "T") for mid in IDS], epoch, batch_id)
    claims.release(epoch, batch_id, (True, orphans))


def test_a_batch_fenced_while_stalled_after_its_first_table_applies_nothing_twice(tmp_path, monkeypatch):
    monkeypatch.setattr(crashpoints, "_seen", {})
    monkeypatch.setattr(crashpoints, "_failed", set())
    monkeypatch.setenv("SAFEBUNNY_STALL_AT", "step.after_one_effect")
    monkeypatch.setenv("SAFEBUNNY_STALL_DIR", str(tmp_path))
    tables = [str(tmp_path / "t1"), str(tmp_path / "t2")]

    def rows(epoch):
        return pa.table({"messageId": IDS, "epoch": [epoch] * len(IDS)})

    effects = {Effect("append", None, t).key: (Effect("append", None, t), rows) for t in tables}
    inbox = str(tmp_path / "inbox")
    errors: list[BaseException] = []

    def zombie():
        try:
            _run(BatchClaims("ship", Inbox(inbox, "ship")), effects, "EA", 1)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    a = threading.Thread(target=zombie, daemon=True)
    a.start()
    deadline = time.monotonic() + 60
    while not (tmp_path / "stalled").exists():
        assert time.monotonic() < deadline and a.is_alive(), f"A never stalled: {errors}"
        time.sleep(0.02)
    monkeypatch.delenv("SAFEBUNNY_STALL_AT")  # B passes the same point: it must not stall
    b = BatchClaims("ship", Inbox(inbox, "ship"))
    _run(b, effects, "EB", 0)  # leaves A's ids out of t1, fences A out of t2, marks them done, releases A's claim
    assert b.claims.others("", -1) == [], "no claim left: A's ids are all done"
    (tmp_path / "release").touch()
    a.join(60)
    assert not a.is_alive() and not errors, errors
    for table, by in zip(tables, ("EA", "EB"), strict=True):
        got = DeltaRsTarget(table).read().to_pylist()
        assert sorted(r["messageId"] for r in got) == IDS and {r["epoch"] for r in got} == {by}, (table, got)
