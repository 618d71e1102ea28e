"""``first_stream.start``: a driver's first streaming query starts alone until Spark has created its sources
(Spark's source runner adds keys to a map every query of the format shares; see safebunny.spark.first_stream).
Test doubles stand for the writer and the query, whose status message is scripted."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest

from safebunny.spark import first_stream


@pytest.fixture(autouse=True)
def _new_driver(monkeypatch):
    monkeypatch.setattr(first_stream, "_done", False)


class _Query:
    """A query whose status says "Initializing sources" until ``created`` is set."""

    def __init__(self, name: str, fails: bool = False) -> None:
        self.name = name
        self.created = threading.Event()
        self.fails = fails
        self.ended = False

    @property
    def status(self) -> dict:
        if self.fails and self.created.is_set():
            self.ended = True
            return {"message": "Initializing sources"}  # failed while creating its sources
        return {"message": "Waiting for data to arrive" if self.created.is_set() else "Initializing sources"}

    @property
    def isActive(self) -> bool:
        return not self.ended

    def exception(self):  # type: ignore[no-untyped-def]
        return RuntimeError("boom") if self.ended else None


class _Writer:
    def __init__(self, query: _Query, events: list[str]) -> None:
        self.query, self.events = query, events

    def start(self) -> _Query:
        self.events.append(f"start {self.query.name}")
        return self.query


_CLASSIC = SimpleNamespace(_jsparkSession=object())


def _start_in_thread(writer: _Writer) -> threading.Thread:
    thread = threading.Thread(target=first_stream.start, args=(_CLASSIC, writer))
    thread.start()
    return thread


def test_the_first_query_starts_alone_until_its_sources_exist():
    events: list[str] = []
    a, b = _Query("a"), _Query("b")
    first = _start_in_thread(_Writer(a, events))
    time.sleep(0.1)
    second = _start_in_thread(_Writer(b, events))
    time.sleep(0.2)
    assert events == ["start a"]  # b waits while a's sources are being created
    a.created.set()
    first.join(5), second.join(5)
    assert events == ["start a", "start b"]
    assert first_stream._done


def test_later_starts_do_not_wait():
    events: list[str] = []
    a = _Query("a")
    a.created.set()
    first_stream.start(_CLASSIC, _Writer(a, events))
    started = time.monotonic()
    first_stream.start(_CLASSIC, _Writer(_Query("b"), events))  # never leaves "Initializing sources"
    assert time.monotonic() - started < 0.5
    assert events == ["start a", "start b"]


def test_a_first_query_that_fails_while_initialising_leaves_the_next_start_waiting_again():
    events: list[str] = []
    a = _Query("a", fails=True)
    a.created.set()
    assert first_stream.start(_CLASSIC, _Writer(a, events)) is a
    assert not first_stream._done
    b = _Query("b")
    b.created.set()
    first_stream.start(_CLASSIC, _Writer(b, events))
    assert first_stream._done


def test_a_first_query_that_ends_quickly_counts_as_created():
    q = _Query("a")
    q.created.set()
    q.ended = True  # an availableNow query with nothing to read: over before the first look
    q.exception = lambda: None  # type: ignore[method-assign]
    assert first_stream.sources_created(q)


def test_a_query_still_initialising_after_the_timeout_lets_the_next_start_go(caplog):
    assert not first_stream.sources_created(_Query("slow"), timeout_s=0.1)
    assert "query slow is still 'Initializing sources' after 0 s" in caplog.text


def test_spark_connect_starts_go_straight_through():
    events: list[str] = []
    first_stream.start(SimpleNamespace(), _Writer(_Query("a"), events))  # no _jsparkSession: Connect
    assert events == ["start a"] and not first_stream._done


def test_a_batch_job_waits_for_a_first_start_and_goes_through_once_it_is_done():
    events: list[str] = []
    a = _Query("a")
    first = _start_in_thread(_Writer(a, events))
    time.sleep(0.1)

    def publish() -> None:
        with first_stream.guarded(_CLASSIC):
            events.append("publish")

    job = threading.Thread(target=publish)
    job.start()
    time.sleep(0.2)
    assert events == ["start a"]  # the job's tasks would be serialised while the map grows
    a.created.set()
    first.join(5), job.join(5)
    assert events == ["start a", "publish"]
    with first_stream.guarded(_CLASSIC):  # done: no lock any more
        assert not first_stream._lock.locked()


@pytest.mark.parametrize(("text", "race"), [
    ("Job aborted due to stage failure: Task serialization failed: java.lang.IllegalStateException: Illegal size 1 "
     "of collection, expected 2\njava.lang.IllegalStateException: ...", True),
    ("Task serialization failed: java.lang.IllegalStateException: Illegal size 12 of collection, expected 11", True),
    ("Task serialization failed: java.io.NotSerializableException: org.example.Thing", False),
    ("java.lang.IllegalStateException: Illegal size 1 of collection, expected 2", False),  # not a task's
    ("Task not serializable: java.io.NotSerializableException", False),
])
def test_the_serialisation_race_is_matched_exactly(text, race):
    assert first_stream.is_serialization_race(RuntimeError(text)) is race
    assert first_stream.is_serialization_race(text) is race


def test_a_new_registration_makes_the_next_start_wait_again():
    events: list[str] = []
    a = _Query("a")
    a.created.set()
    first_stream.start(_CLASSIC, _Writer(a, events))
    assert first_stream._done
    first_stream.new_map()
    assert not first_stream._done
