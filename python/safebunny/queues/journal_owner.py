"""The owner of a ``journalLocation`` (one query per journal) and its id in the offsets.

The first query that journals a batch in a location creates its owner file, ``journal-owner.json``
(:func:`~safebunny.storage.writes.write_if_absent`), a lease (:mod:`safebunny.storage.lease`) that carries the
journal id, the queue, the claim time and ``logged``; every offset it returns carries that id. Which offsets
and owners are refused and when a stale owner's location is taken over: docs/source.md ("One query per
``journalLocation``").
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import time
import uuid
from dataclasses import dataclass

import pyarrow.fs as pafs

from safebunny.errors import JournalOwnerError, SafeBunnyError
from safebunny.queues.journal import Journal
from safebunny.storage.lease import DAMAGED, Lease, Renewer, write_lease
from safebunny.storage.records import read_record
from safebunny.storage.writes import writes_whole

__all__ = ["OWNER_FILE", "LEASE_SECONDS", "OFFSET_KEY", "JournalOwner", "JournalOwnerError"]

#: the owner file under a journal location (no ``.arrow`` suffix: never taken for a batch)
OWNER_FILE = "journal-owner.json"
#: the key of the journal id in the source's offsets
OFFSET_KEY = "journal"
#: how long an owner on another host counts as running after its last renewal (or claim)
LEASE_SECONDS = 120.0
#: how often a live owner renews its record
RENEW_SECONDS = 30.0
#: the owner file's key for the lease's holder, the reader instance (the name it had before leases)
HOLDER = "instance"

log = logging.getLogger("safebunny.source")


@dataclass(frozen=True)
class OwnerRecord:
    """The owner file: the lease of the reader ``instance``, for journal id ``id`` over ``queue``."""

    lease: Lease

    id = property(lambda self: str(self.lease.payload["id"]))
    instance = property(lambda self: self.lease.holder)
    queue = property(lambda self: str(self.lease.payload.get("queue", "?")))
    claimed = property(lambda self: float(self.lease.payload.get("claimed", 0.0)))
    #: Spark logged a batch of this id (seen as a start, a replayed end, or a commit)
    logged = property(lambda self: bool(self.lease.payload.get("logged", True)))

    def describe(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.claimed))
        state = "a batch of it is in a Spark offset log" if self.logged else "no batch of it was logged yet"
        return (f"journal id {self.id!r}, queue {self.queue!r}, claimed {when} by process {self.lease.pid} on "
                f"{self.lease.host!r}; {state}")


class JournalOwner:
    """The ownership of one reader's journal location; see the module docstring."""

    def __init__(self, journal: Journal, queue: str) -> None:
        self.journal = journal
        self.queue = queue
        self.instance = uuid.uuid4().hex
        self.id: str | None = None
        self._logged = False
        self._path = f"{journal.root.rstrip('/')}/{OWNER_FILE}"
        # a rename of the stale owner aside where the filesystem has renames (not an object store or a volume)
        self._local = isinstance(journal.fs, pafs.LocalFileSystem) and not writes_whole(journal.fs, self._path)
        self.renew_seconds = RENEW_SECONDS
        self._renewer: Renewer | None = None

    # ------------------------------------------------------------------ file access
    def read(self) -> OwnerRecord | None:
        """The owner file's record, or None when there is none."""
        for attempt in range(20):
            data = read_record(self.journal.fs, self._path)
            if data is None:
                return None
            try:
                return OwnerRecord(Lease.from_json(data, HOLDER))
            except DAMAGED:
                if attempt == 19:  # not a half-written claim: a damaged file
                    raise JournalOwnerError(
                        f"The owner file {self._path!r} of option 'journalLocation' {self.journal.location!r} cannot "
                        f"be read ({data[:80]!r}). Delete it only if no other query uses this location, then "
                        "restart.") from None
                time.sleep(0.05)
        return None

    def _record(self, journal_id: str, logged: bool) -> OwnerRecord:
        """A new claim of this reader, now."""
        now = time.time()
        payload = {"id": journal_id, "queue": self.queue, "claimed": now, "logged": logged}
        return OwnerRecord(Lease.mine(self.instance, payload, now))

    def _create(self, record: OwnerRecord) -> bool:
        """Write the owner file unless one exists; True when this call created it."""
        self.journal.ensure()
        return write_lease(self.journal.fs, self._path, record.lease, HOLDER, if_absent=True)

    def _replace(self, record: OwnerRecord) -> None:
        """Rewrite the owner file (this reader owns it already)."""
        write_lease(self.journal.fs, self._path, record.lease, HOLDER)

    def _take_over(self, stale: OwnerRecord) -> bool:
        """Replace the stale owner ``stale`` by a new claim of ours; False when another query was quicker."""
        record = self._record(uuid.uuid4().hex, logged=False)
        if stale.logged:
            log.warning("journalLocation %r: taking over from query %s, which is gone (a new checkpoint over the "
                        "same queue); its journaled batches are dropped, the broker requeued their messages",
                        self.journal.location, stale.describe())
        if self._local:
            aside = f"{self._path}.{uuid.uuid4().hex}.stale"
            try:
                os.rename(self._path, aside)
            except FileNotFoundError:
                return self._won(record, stale)
            with open(aside, "rb") as f:
                moved = OwnerRecord(Lease.from_json(f.read(), HOLDER))
            if moved.instance != stale.instance or moved.id != stale.id:
                # another query claimed the location after we judged it: put its file back and look again
                with contextlib.suppress(OSError):
                    os.link(aside, self._path)
                os.unlink(aside)
                return False
            os.unlink(aside)
            return self._won(record, stale)
        self._replace(record)
        return self._won(record, stale) if self.read() == record else False

    def _won(self, record: OwnerRecord, stale: OwnerRecord | None = None) -> bool:
        if self.read() == record or self._create(record):
            self.id, self._logged = record.id, record.logged
            self._live()
            if stale is not None and stale.logged:  # its batches must never be served as ours
                self.journal.delete_through(2**62)
            return True
        return False

    # ------------------------------------------------------------------ decisions
    def _running(self, owner: OwnerRecord) -> bool:
        lease = owner.lease if owner.lease.renewed is not None else owner.lease.renew(owner.claimed)  # an old record
        return owner.instance != self.instance and lease.live(LEASE_SECONDS)

    def _refuse(self, owner: OwnerRecord, why: str) -> JournalOwnerError:
        return JournalOwnerError(
            f"Option 'journalLocation' {self.journal.location!r} belongs to another query ({owner.describe()}), "
            f"and {why}. Two queries sharing a journal would serve and ack each other's messages. Give each query "
            "its own 'journalLocation' (for example next to its checkpoint). If the query that owns it is gone for "
            f"good (its checkpoint deleted), delete {self._path!r} and its batch-*.arrow files, then restart.")

    def _replaced_checkpoint(self, owner: OwnerRecord) -> bool:
        """A logged owner may be taken over by a new checkpoint only when it is gone and read the same queue: a
        query restarted with its checkpoint deleted, on this host or another. Its unacked messages went back to
        the queue when its connection closed. Another host's owner is gone when its renewals stopped; one that
        never renewed (an older version) cannot be seen gone: never."""
        if owner.lease.host != socket.gethostname() and owner.lease.renewed is None:
            return False
        return owner.queue == self.queue and not self._running(owner)

    def check_unclaimed(self) -> None:
        """For an offset without an id: raise unless the location is free or its owner is stale."""
        if self.id is not None:
            return
        owner = self.read()
        if owner is None:
            return
        if self._running(owner):
            raise self._refuse(owner, "that query is running")
        if owner.logged and not self._replaced_checkpoint(owner):
            raise self._refuse(owner, "this query's checkpoint carries no journal id (a new checkpoint, or one "
                                      "written before journal ids), so it is not that query")

    def claim(self) -> str:
        """The id to put in the next offset: ours, or a new claim of a free or stale location."""
        if self.id is not None:
            self.verify()
            return self.id
        for _ in range(5):
            self.check_unclaimed()
            owner = self.read()
            if owner is None:
                if self._won(self._record(uuid.uuid4().hex, logged=False)):
                    return self.id  # type: ignore[return-value]
            elif self._take_over(owner):
                return self.id  # type: ignore[return-value]
        raise SafeBunnyError(f"Could not claim option 'journalLocation' {self.journal.location!r}: other queries "
                             "keep claiming it at the same time. Give each query its own journalLocation.")

    def adopt(self, journal_id: str) -> None:
        """An offset Spark logged carries ``journal_id``: the location must be that query's."""
        if self.id is not None and self.id != journal_id:
            raise JournalOwnerError(
                f"Spark handed the reader of option 'journalLocation' {self.journal.location!r} an offset of journal "
                f"id {journal_id!r}, but this reader journals as {self.id!r}: the checkpoint and the journal location "
                "do not belong together. Give each query its own journalLocation.")
        if self.id == journal_id and self._logged:
            return
        owner = self.read()
        if owner is None:
            # emptied or moved: the id in Spark's offset log is the authority
            if not self._create(self._record(journal_id, logged=True)):
                owner = self.read()
        if owner is not None:
            if owner.id != journal_id:
                raise self._refuse(owner, f"this query's checkpoint carries journal id {journal_id!r}")
            if not owner.logged or owner.instance != self.instance:
                self._replace(self._record(journal_id, logged=True))
        self.id, self._logged = journal_id, True
        self._live()

    def verify(self) -> None:
        """Before each journal write: the owner file must still be ours."""
        owner = self.read()
        if owner is None:
            self._create(self._record(self.id, logged=self._logged))  # type: ignore[arg-type]
            owner = self.read()
        if owner is not None and owner.id != self.id:
            raise self._refuse(owner, f"this query journals as {self.id!r}: the owner file was replaced while it ran")

    def release(self) -> None:
        """This reader stops: it no longer counts as running (the owner file stays)."""
        if self._renewer is not None:
            self._renewer.stop()

    def _live(self) -> None:
        """This reader owns the location now: count it as running here, and renew its record for other hosts."""
        if self._renewer is None or not self._renewer.is_alive():
            self._renewer = Renewer(self.instance, self.renew, self.renew_seconds, lambda exc: log.warning(
                "journalLocation %r: renewing the owner record failed (%s); other hosts count this query as running "
                "for %.0f s after its last renewal", self.journal.location, exc, LEASE_SECONDS))
            self._renewer.start()

    def renew(self) -> bool:
        """Rewrite the owner record with the time now, while it is still ours; False when it is not."""
        owner = self.read()
        if owner is None or self.id is None or owner.id != self.id or owner.instance != self.instance:
            return False
        self._replace(OwnerRecord(owner.lease.renew()))
        return True

