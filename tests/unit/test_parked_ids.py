"""A saga step's parkings in the fenced decision table (:mod:`safebunny.saga.run.parked_ids`,
:meth:`safebunny.exactly_once.claims.batch_claims.BatchClaims.commit_decisions`), with real delta-rs tables: writers
at once lose nothing, and two writers of one message's decision land one."""

from __future__ import annotations

import threading

from safebunny.exactly_once.claims.batch_claims import BatchClaims
from safebunny.exactly_once.inbox.decisions import parking
from safebunny.exactly_once.inbox.table import Inbox
from safebunny.saga.run.parked_ids import ParkedIds


def _commit_at_once(tmp_path, batches):
    """Commit each of ``batches`` (epoch -> id -> decision) from its own thread, all released together."""
    start = threading.Barrier(len(batches))
    errors: list[BaseException] = []
    landed: dict[str, dict] = {}

    def run(epoch, decisions):
        try:
            claims = BatchClaims("stock", Inbox(str(tmp_path / "inbox"), "stock"))
            start.wait()
            landed[epoch] = claims.commit_decisions(None, epoch, 0, sorted(decisions), decisions,
                                                    dict.fromkeys(decisions))
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    threads = [threading.Thread(target=run, args=item) for item in batches.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    return landed


def test_writers_of_parkings_at_once_lose_nothing(tmp_path):
    """Before, each writer rewrote ``poison/<step>.parked.json`` whole from what it had read: of two at once, the
    last write won and the other's parkings were lost (a parked message then applied on its next copy)."""
    batches = {f"E{k}": {f"m{k}-{i}": parking({"reason": f"down {k}", "error_type": "ServiceDown", "attempt": 1,
                                                 "redriven": None}) for i in range(3)} for k in range(6)}
    _commit_at_once(tmp_path, batches)
    parked = ParkedIds(str(tmp_path / "none.parked.json"), str(tmp_path / "inbox"), "stock")
    everyone = {mid for decisions in batches.values() for mid in decisions}
    found = parked.parkings(dict.fromkeys(everyone))
    assert set(found) == everyone
    assert {mid: d["reason"] for mid, d in found.items()} == {mid: f"down {mid[1]}" for mid in everyone}


def test_two_batches_deciding_one_message_at_once_land_one_decision_and_both_read_it(tmp_path):
    """One batch parks ``x``, the other applies it (a row handler's decision), at once: one lands, and each batch
    reads back that one (the other follows it: applies it, or parks it as recorded)."""
    decided = {"EA": {"x": parking({"reason": "down", "error_type": "ServiceDown", "attempt": 1, "redriven": None})},
               "EB": {"x": {"ok": True, "effects": [], "emits": []}}}
    landed = _commit_at_once(tmp_path, decided)
    assert landed["EA"]["x"] == landed["EB"]["x"], landed
    rows = BatchClaims("stock", Inbox(str(tmp_path / "inbox"), "stock")).decisions.committed(["x"])
    assert len(rows) == 1, rows


def test_two_batches_whose_decisions_create_the_table_land_one(tmp_path):
    """The race that found the hole: both batches' first commits would create the decision table. delta-rs let the
    losing create commit at the next version without checking the app transactions both carry (both decisions
    landed, 1 run in 3 on a quiet machine); a table is now created empty first, so every commit with an app id has
    a snapshot to conflict against. Many rounds, each on a fresh table."""
    for round_ in range(12):
        folder = tmp_path / f"r{round_}"
        decided = {"EA": {"x": parking({"reason": "down", "error_type": "ServiceDown", "attempt": 1,
                                        "redriven": None})},
                   "EB": {"x": {"ok": True, "effects": [], "emits": []}}}
        landed = _commit_at_once(folder, decided)
        assert landed["EA"]["x"] == landed["EB"]["x"], (round_, landed)
        assert len(BatchClaims("stock", Inbox(str(folder / "inbox"), "stock")).decisions.committed(["x"])) == 1
