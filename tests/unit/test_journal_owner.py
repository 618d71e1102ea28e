"""One query per journal location; the owner's id travels in the offsets (no broker needed)."""

import json
import subprocess
import sys
import time

import pytest

from safebunny.queues.journal import Journal
from safebunny.queues.journal_owner import LEASE_SECONDS, OWNER_FILE, JournalOwner, JournalOwnerError


def _owner(path, queue="orders"):
    return JournalOwner(Journal(str(path)), queue)


def _rewrite(path, **fields):
    record = json.loads((path / OWNER_FILE).read_text())
    record.update(fields)
    (path / OWNER_FILE).write_text(json.dumps(record))


def test_the_first_claim_creates_the_owner_file_and_keeps_its_id(tmp_path):
    a = _owner(tmp_path)
    a.check_unclaimed()
    journal_id = a.claim()
    assert a.claim() == journal_id
    assert json.loads((tmp_path / OWNER_FILE).read_text())["id"] == journal_id
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_a_second_reader_on_a_running_owners_location_is_refused_with_the_option_and_value(tmp_path):
    a = _owner(tmp_path)
    a.claim()
    b = _owner(tmp_path, queue="payments")
    with pytest.raises(JournalOwnerError) as info:
        b.check_unclaimed()
    message = str(info.value)
    assert info.value.option == "journalLocation" and str(tmp_path) in message
    assert "'orders'" in message and "that query is running" in message and OWNER_FILE in message
    with pytest.raises(JournalOwnerError):
        b.claim()


def test_an_owner_that_died_before_spark_logged_its_first_batch_is_taken_over(tmp_path):
    # the reader crashed between claiming and Spark's offset-log write: the restart starts from the
    # initial offset (no id) and must not be locked out of its own location
    a = _owner(tmp_path)
    first = a.claim()
    a.release()
    b = _owner(tmp_path)
    b.check_unclaimed()
    second = b.claim()
    assert second != first
    assert json.loads((tmp_path / OWNER_FILE).read_text())["id"] == second


def test_a_logged_owner_is_taken_over_only_by_a_new_checkpoint_of_its_queue_once_it_is_gone(tmp_path):
    a = _owner(tmp_path)
    journal_id = a.claim()
    a.adopt(journal_id)  # Spark handed back an offset of it: it is in an offset log
    (tmp_path / "batch-00000000000000000000-00000000000000000100.arrow").write_bytes(b"old batch")
    running = _owner(tmp_path)
    with pytest.raises(JournalOwnerError, match="that query is running"):
        running.check_unclaimed()
    a.release()
    stranger = _owner(tmp_path, queue="payments")  # another queue: a shared location, not a new checkpoint
    with pytest.raises(JournalOwnerError, match="carries no journal id"):
        stranger.check_unclaimed()
    restarted = _owner(tmp_path)
    restarted.adopt(journal_id)  # the same query, restarted from its checkpoint
    assert restarted.claim() == journal_id
    restarted.release()
    replaced = _owner(tmp_path)  # the same queue, its checkpoint deleted: takes over, drops the old batches
    replaced.check_unclaimed()
    assert replaced.claim() != journal_id
    assert not list(tmp_path.glob("batch-*.arrow"))
    old = _owner(tmp_path)  # the old checkpoint, should it come back, is refused
    with pytest.raises(JournalOwnerError):
        old.adopt(journal_id)


def test_a_logged_owner_on_another_host_from_before_renewals_is_never_taken_over(tmp_path):
    a = _owner(tmp_path)
    a.adopt(a.claim())
    a.release()
    _rewrite(tmp_path, host="another-host", claimed=time.time() - 10 * LEASE_SECONDS, renewed=None)
    with pytest.raises(JournalOwnerError, match="carries no journal id"):
        _owner(tmp_path).check_unclaimed()


def test_a_logged_owner_on_another_host_is_taken_over_once_its_renewals_stopped(tmp_path):
    """A driver that died on one host, started again on another with a new checkpoint over the same journal."""
    a = _owner(tmp_path)
    a.adopt(a.claim())
    a.release()
    old_batch = tmp_path / f"batch-{0:020d}-{5:020d}.arrow"
    old_batch.write_bytes(b"old")  # a batch of the dead owner: never served to the new one
    _rewrite(tmp_path, host="another-host", claimed=time.time() - 10 * LEASE_SECONDS, renewed=time.time() - 5)
    with pytest.raises(JournalOwnerError, match="that query is running"):
        _owner(tmp_path).check_unclaimed()
    _rewrite(tmp_path, renewed=time.time() - LEASE_SECONDS - 1)
    with pytest.raises(JournalOwnerError, match="carries no journal id"):
        _owner(tmp_path, queue="another-queue").check_unclaimed()  # the same location over another queue: not it
    b = _owner(tmp_path)
    b.check_unclaimed()
    new_id = b.claim()
    assert json.loads((tmp_path / OWNER_FILE).read_text())["id"] == new_id != a.id
    assert not old_batch.exists()


def test_a_live_owner_renews_its_record_from_its_own_thread_until_it_stops(tmp_path):
    a = _owner(tmp_path)
    a.renew_seconds = 0.05
    a.adopt(a.claim())
    first = json.loads((tmp_path / OWNER_FILE).read_text())["renewed"]
    deadline = time.monotonic() + 10
    while json.loads((tmp_path / OWNER_FILE).read_text())["renewed"] == first:
        assert time.monotonic() < deadline, "the owner record was never renewed"
        time.sleep(0.05)
    a.release()
    a._renewer.join(timeout=5)
    assert not a._renewer.is_alive()
    # a record that is no longer ours is left alone
    _rewrite(tmp_path, instance="someone-else")
    assert a.renew() is False


def test_an_offset_of_another_journal_is_refused(tmp_path):
    a = _owner(tmp_path)
    a.claim()
    other = _owner(tmp_path)
    with pytest.raises(JournalOwnerError, match="checkpoint carries journal id 'feedface'"):
        other.adopt("feedface")


def test_a_missing_owner_file_is_written_again_from_the_offsets_id(tmp_path):
    owner = _owner(tmp_path)
    owner.adopt("cafe01")
    (tmp_path / OWNER_FILE).unlink()
    again = _owner(tmp_path)
    again.adopt("cafe01")
    assert json.loads((tmp_path / OWNER_FILE).read_text())["id"] == "cafe01"


def test_an_unlogged_owner_in_another_live_process_is_refused_and_taken_over_once_it_exits(tmp_path):
    a = _owner(tmp_path)
    a.claim()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with open(f"/proc/{child.pid}/stat") as f:
            start = f.read().rsplit(")", 1)[1].split()[19]
        _rewrite(tmp_path, pid=child.pid, pid_start=start, instance="elsewhere")
        with pytest.raises(JournalOwnerError, match="running"):
            _owner(tmp_path).check_unclaimed()
        _rewrite(tmp_path, pid_start="1")  # the pid reused by another process: not the owner
        _owner(tmp_path).check_unclaimed()
        _rewrite(tmp_path, pid_start=start)
    finally:
        child.kill()
        child.wait()
    b = _owner(tmp_path)
    b.check_unclaimed()
    assert b.claim()


def test_an_unlogged_owner_on_another_host_holds_the_location_for_the_lease(tmp_path):
    _owner(tmp_path).claim()
    _rewrite(tmp_path, host="elsewhere.example", claimed=time.time() - 5)
    with pytest.raises(JournalOwnerError, match="running"):
        _owner(tmp_path).check_unclaimed()
    _rewrite(tmp_path, claimed=time.time() - LEASE_SECONDS - 1, renewed=time.time() - LEASE_SECONDS - 1)
    assert _owner(tmp_path).claim()


def test_an_owner_file_replaced_while_running_stops_the_next_write(tmp_path):
    a = _owner(tmp_path)
    a.claim()
    _rewrite(tmp_path, id="intruder")
    with pytest.raises(JournalOwnerError, match="replaced while it ran"):
        a.claim()


def test_a_take_over_that_lost_the_race_puts_the_winners_claim_back(tmp_path):
    a = _owner(tmp_path)
    a.claim()
    a.release()
    stale = _owner(tmp_path).read()  # b judged a's claim stale ...
    c = _owner(tmp_path)
    winner = c.claim()  # ... but c took the location over first
    b = _owner(tmp_path)
    assert b._take_over(stale) is False
    assert json.loads((tmp_path / OWNER_FILE).read_text())["id"] == winner and b.id is None
    with pytest.raises(JournalOwnerError, match="running"):
        b.claim()
