"""Driver leases and the shard balance they decide: pure logic, and the lease files on a local folder."""

from __future__ import annotations

import datetime as dt
import json
import time
from collections import Counter
from types import SimpleNamespace

import pytest

from safebunny.exactly_once.protocol.report import BatchReport
from safebunny.options.connection import ConnectionSettings
from safebunny.saga.define.config import SagaConfig, SagaLayout
from safebunny.saga.run.leases import HOLD_S, SETTLE_S, TTL_S, Balancer, LeaseStore, assign, handovers, live, mine
from safebunny.saga.run.reports import ReportStore
from safebunny.storage.lease import Lease

NOW = dt.datetime(2026, 11, 26, 10, 0, 0, tzinfo=dt.timezone.utc)


def _ago(seconds: float) -> str:
    return (NOW - dt.timedelta(seconds=seconds)).isoformat()


def _epoch_ago(seconds: float) -> float:
    return (NOW - dt.timedelta(seconds=seconds)).timestamp()


def _payload(running: dict | None = None, holding: dict | None = None) -> dict:
    return {"started": _ago(600), "running": running or {}, "holding": holding or {}}


def _lease(driver: str, renewed: float = 0.0, running: dict | None = None, holding: dict | None = None) -> Lease:
    return Lease(driver, "host", 1, None, _epoch_ago(renewed), _payload(running, holding))


def _shards(step: str, n: int) -> list[str]:
    return [f"{step}.shard.{i}" for i in range(n)]


SHARDS = {"stock.OrderPlaced": _shards("stock.OrderPlaced", 4),
          "shipping.StockReserved": _shards("shipping.StockReserved", 2)}


@pytest.mark.parametrize("drivers", [["a"], ["a", "b"], ["b", "a", "c"], ["a", "b", "c", "d", "e"]])
def test_every_step_is_split_evenly_and_every_process_computes_the_same_split(drivers: list[str]) -> None:
    got = assign(SHARDS, drivers)
    assert got == assign(SHARDS, list(reversed(drivers)))  # the order drivers were listed in does not matter
    assert set(got) == {label for labels in SHARDS.values() for label in labels}
    for labels in SHARDS.values():
        per_driver = Counter(got[label] for label in labels)
        share = len(labels) // len(drivers)
        assert all(count in (share, share + 1) for count in per_driver.values()), per_driver
        assert sum(per_driver.values()) == len(labels)


def test_no_driver_means_no_assignment() -> None:
    assert assign(SHARDS, []) == {}


def test_a_lease_not_renewed_within_its_ttl_is_not_live() -> None:
    leases = [_lease("b", renewed=TTL_S + 1), _lease("a", renewed=1), _lease("c", renewed=TTL_S)]
    assert [lease.holder for lease in live(leases, NOW)] == ["a", "c"]


def test_a_held_shard_goes_to_its_assigned_driver_only_once_that_driver_waits_for_it() -> None:
    labels = _shards("stock.OrderPlaced", 4)
    assignment = assign({"stock.OrderPlaced": labels}, ["a", "b"])
    mine = [label for label in labels if assignment[label] == "a"]
    theirs = [label for label in labels if assignment[label] == "b"]
    held = {label: _epoch_ago(30) for label in labels}
    settled = {label: _ago(SETTLE_S + 1) for label in labels}
    b = _lease("b", running=settled)
    assert handovers("a", held, assignment, [_lease("a"), b], NOW) == {label: "b" for label in theirs}
    # b's queries started a moment ago: their consumers may not wait yet, so nothing moves
    fresh = _lease("b", running={label: _ago(1) for label in labels})
    assert handovers("a", held, assignment, [_lease("a"), fresh], NOW) == {}
    # b runs no query for a shard (its query failed): that shard stays
    partial = _lease("b", running={theirs[0]: _ago(SETTLE_S + 1)})
    assert handovers("a", held, assignment, [_lease("a"), partial], NOW) == {theirs[0]: "b"}
    # a shard a holds and is assigned, or one it does not hold, never moves
    assert handovers("a", {label: held[label] for label in mine}, assignment, [_lease("a"), b], NOW) == {}


def test_a_shard_taken_over_from_a_driver_that_died_is_not_handed_back_while_its_lease_lives() -> None:
    """The flake CI caught twice (test_saga_drivers' standby takeover, one shard unheld at the check): b took
    a's shards over when a was killed; a's lease stays live for TTL_S, and b handed a's share "back" to
    the dead driver, restarting its own query for each such shard (the shard unheld meanwhile)."""
    labels = _shards("stock.OrderPlaced", 4)
    assignment = assign({"stock.OrderPlaced": labels}, ["a", "b"])
    theirs = [label for label in labels if assignment[label] == "a"]
    settled = {label: _ago(TTL_S + 30) for label in labels}
    dead = _lease("a", renewed=TTL_S - 5, running=settled)  # its last renewal, before it died: still live
    took_over = {label: _epoch_ago(TTL_S - 10) for label in labels}  # b first found them held after a's renewal
    assert [lease.holder for lease in live([dead], NOW)] == ["a"]
    assert handovers("b", took_over, assignment, [dead, _lease("b")], NOW) == {}
    # a live a renews within RENEW_S of b taking the shards over, and then gets its share
    alive = _lease("a", renewed=1, running=settled)
    assert handovers("b", took_over, assignment, [alive, _lease("b")], NOW) == {label: "a" for label in theirs}


def test_lease_files_round_trip_and_a_stray_file_is_skipped(tmp_path) -> None:
    store = _store(tmp_path)
    assert store.read_all() == []
    lease = _lease("a", running={"s.shard.0": _ago(5)}, holding={"s.shard.0": _ago(2)})
    store.write(lease)
    (tmp_path / "drivers" / "_leases" / "junk.json").write_text("{not json")
    assert store.read_all() == [lease]
    store.remove("a")
    store.remove("a")  # removing twice is fine
    assert store.read_all() == []


def _store(root) -> LeaseStore:
    return LeaseStore(SagaLayout(str(root)).leases)


def _saga(root, driver: str = "a") -> SimpleNamespace:
    units = [SimpleNamespace(label="stock.OrderPlaced", shard=i, unit_label=f"stock.OrderPlaced.shard.{i}")
             for i in range(2)]
    config = SagaConfig("s", ConnectionSettings("amqp://localhost"), SagaLayout(str(root), driver))
    return SimpleNamespace(config=config, units=lambda: units)


def _batch(root, label: str, driver: str, at: dt.datetime, batch_id: int = 0) -> None:
    ReportStore(str(root), label).record(BatchReport("stock", "epoch-1", batch_id, 3, 0, 0, 3, 0, 0, False, 0.1, at),
                                         driver)


def test_a_driver_holds_a_shard_when_its_own_batch_ran_there_since_its_query_started(tmp_path) -> None:
    clock = [NOW]
    balancer = Balancer(_saga(tmp_path), clock=lambda: clock[0], renew_s=0)
    clock[0] = NOW - dt.timedelta(seconds=30)
    balancer.started_query("stock.OrderPlaced.shard.0")
    balancer.started_query("stock.OrderPlaced.shard.1")
    clock[0] = NOW
    _batch(tmp_path, "stock.OrderPlaced.shard.0", "a", NOW - dt.timedelta(seconds=5))
    _batch(tmp_path, "stock.OrderPlaced.shard.1", "b", NOW - dt.timedelta(seconds=5))
    assert set(balancer.held(NOW)) == {"stock.OrderPlaced.shard.0"}
    # restarted (handed over): the batch before the restart is no evidence
    balancer.handed("stock.OrderPlaced.shard.0")
    assert balancer.held(NOW) == {}
    # an old batch is no evidence either
    later = NOW + dt.timedelta(seconds=HOLD_S + 10)
    balancer.started_query("stock.OrderPlaced.shard.1")
    _batch(tmp_path, "stock.OrderPlaced.shard.1", "a", NOW + dt.timedelta(seconds=1), batch_id=1)
    assert set(balancer.held(NOW + dt.timedelta(seconds=2))) == {"stock.OrderPlaced.shard.1"}
    assert balancer.held(later) == {}


def test_a_renewal_writes_the_lease_and_hands_over_what_the_other_live_driver_should_hold(tmp_path) -> None:
    clock = [NOW - dt.timedelta(seconds=30)]
    balancer = Balancer(_saga(tmp_path), clock=lambda: clock[0], renew_s=0)
    labels = ["stock.OrderPlaced.shard.0", "stock.OrderPlaced.shard.1"]
    for label in labels:
        balancer.started_query(label)
    clock[0] = NOW
    for label in labels:
        _batch(tmp_path, label, "a", NOW - dt.timedelta(seconds=1))
    assert balancer.tick(labels) == {} and not _store(tmp_path).read_all()  # a tick writes nothing
    assert balancer.renew() == {}  # alone: a keeps both
    assert _store(tmp_path).read_all()[0].payload["holding"].keys() == set(labels)
    assert _store(tmp_path).read_all()[0].payload["running"].keys() == set(labels)  # what the last tick said runs
    clock[0] = NOW + dt.timedelta(seconds=2)
    # b renews after a found the shards held (a renewal no later would be a driver that may have died)
    _store(tmp_path).write(_lease("b", renewed=-1, running={label: _ago(SETTLE_S + 1) for label in labels}))
    due = balancer.renew()
    assert list(due.values()) == ["b"] and len(due) == 1 and balancer.tick(labels) == due
    (label,) = due
    balancer.handed(label)
    assert balancer.tick(labels) == {}  # cooling down
    assert balancer.renew() == {}  # the handed shard is no longer held; the other is a's share
    balancer.close()
    assert [lease.holder for lease in _store(tmp_path).read_all()] == ["b"]


def test_a_handover_waits_for_the_shards_running_batch_to_end(monkeypatch):
    """Issue 35: a handover stops a shard's query between batches, not mid-batch; after the wait it stops anyway
    (the fence keeps a stopped batch's replay exact)."""
    from types import SimpleNamespace

    from safebunny.saga.run import runner

    class Query:
        def __init__(self):
            self.status = {"isTriggerActive": True}

    now = [100.0]
    monkeypatch.setattr(runner.time, "monotonic", lambda: now[0])
    saga = SimpleNamespace(_handing={}, queries={"stock.0": Query()})
    assert not runner.RunningSaga._between_batches(saga, "stock.0"), "a batch runs: wait"
    saga.queries["stock.0"].status = {"isTriggerActive": False}
    assert runner.RunningSaga._between_batches(saga, "stock.0"), "between batches: hand over now"
    saga.queries["stock.0"].status = {"isTriggerActive": True}
    now[0] += runner.HANDOVER_WAIT_S + 1
    assert runner.RunningSaga._between_batches(saga, "stock.0"), "waited long enough: hand over anyway"


def test_a_handover_still_due_between_lease_renewals_is_made_once_the_wait_ends(tmp_path, monkeypatch):
    """The regression CI caught: a tick between two lease renewals answered 'nothing due', so the runner forgot
    the handover's wait every second and a shard whose query was always busy (orders kept coming) never moved."""
    from safebunny.saga.run import runner

    now = [1000.0]
    monkeypatch.setattr(runner.time, "monotonic", lambda: now[0])
    monkeypatch.setattr("safebunny.saga.run.leases.time.monotonic", lambda: now[0])
    clock = [NOW - dt.timedelta(seconds=30)]
    saga = _saga(tmp_path)
    balancer = Balancer(saga, clock=lambda: clock[0], renew_s=3600)  # renewed by the test only
    labels = [u.unit_label for u in saga.units()]
    for label in labels:
        balancer.started_query(label)
    clock[0] = NOW - dt.timedelta(seconds=1)
    for label in labels:
        _batch(tmp_path, label, "a", NOW - dt.timedelta(seconds=1))
    balancer.renew()  # alone: a holds both
    clock[0] = NOW
    _store(tmp_path).write(_lease("b", running={label: _ago(SETTLE_S + 1) for label in labels}))

    class Query:
        def __init__(self):
            self.status = {"isTriggerActive": True}  # always mid-batch
            self.stopped = False

        @property
        def isActive(self):
            return not self.stopped

        def stop(self):
            self.stopped = True

    queries = {label: Query() for label in labels}
    running = SimpleNamespace(saga=saga, balancer=balancer, queries=dict(queries), _handing={},
                              _start=lambda step: Query())
    running._between_batches = lambda label: runner.RunningSaga._between_batches(running, label)
    balancer.renew()
    runner.RunningSaga._balance(running)  # one shard is b's share, its batch runs: wait
    (label,) = running._handing
    for _ in range(int(runner.HANDOVER_WAIT_S)):  # ticks between renewals keep the wait
        now[0] += 1
        runner.RunningSaga._balance(running)
        assert label in running._handing or queries[label].stopped
    now[0] += 2
    runner.RunningSaga._balance(running)
    assert queries[label].stopped, "the wait ended: the shard is handed over even though its batch still runs"
    assert running._handing == {}
    assert balancer.tick(labels) == {}, "a handed shard is not due again (cooldown)"


def test_a_lease_file_of_the_previous_version_is_read(tmp_path):
    """Before storage leases, a driver's lease had ``renewed`` in ISO 8601 and no process start time."""
    folder = tmp_path / "drivers" / "_leases"
    folder.mkdir(parents=True)
    old = {"driver": "old", "host": "h", "pid": 3, "started": _ago(600), "renewed": _ago(5),
           "running": {"s.shard.0": _ago(60)}, "holding": {}}
    (folder / "old.json").write_text(json.dumps(old))
    (lease,) = _store(tmp_path).read_all()
    assert lease == Lease("old", "h", 3, None, _epoch_ago(5), _payload({"s.shard.0": _ago(60)}))
    assert live([lease], NOW) == [lease]


def test_a_started_balancer_renews_its_lease_from_its_own_thread_until_closed(tmp_path):
    balancer = Balancer(_saga(tmp_path), renew_s=0.05)
    balancer.start()
    store = _store(tmp_path)
    deadline = time.monotonic() + 10
    while not store.read_all():
        assert time.monotonic() < deadline, "the renewer never wrote the lease"
        time.sleep(0.01)
    first = store.read_all()[0].renewed
    while store.read_all()[0].renewed == first:
        assert time.monotonic() < deadline, "the renewer never renewed the lease"
        time.sleep(0.01)
    balancer.close()
    assert store.read_all() == [] and not balancer._renewer.is_alive()


def test_a_driver_on_this_host_lives_by_the_one_lease_rule(tmp_path) -> None:
    """The journal owner's rule (storage.lease.Lease.live): on this host a driver lives while its process runs
    (a renewal within the TTL does not keep a dead process's lease live), in this process while its renewer runs;
    the driver asking counts itself."""
    import socket
    import subprocess
    import sys

    from safebunny.storage.lease import Renewer

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    dead = Lease("d", socket.gethostname(), int(gone.stdout), "0", _epoch_ago(1), _payload())
    here = mine("h", _ago(600), _epoch_ago(TTL_S + 60), {}, {})
    store = _store(tmp_path)
    assert live([dead, here], NOW, path_of=store.path) == []
    assert live([dead, here], NOW, path_of=store.path, me="h") == [here]
    renewer = Renewer("h", lambda: None, 3600, lambda exc: None, path=store.path("h"))
    renewer.start()
    try:
        assert live([dead, here], NOW, path_of=store.path) == [here]
    finally:
        renewer.stop()
