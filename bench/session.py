"""The teardown every bench shares, run however the bench ends: normally, by an exception, or by SIGTERM/SIGINT.

    with bench_session("sb-bench-step-") as session:
        broker = session.stream_broker(uri)   # only the stream benches: a throwaway broker if 5552 does not answer
        book = session.book(broker.uri)       # QueueBook: every queue it declares is deleted at the end
        spark = session.start_spark()         # bench.connector.start_spark on session.workdir
        ...

On leaving the block the session, in this order, deletes the queues still on its books and closes them, stops
Spark, stops the brokers it started (``bench.broker.stream_broker`` uses the broker that already answers and starts
nothing then: that one is left alone) and removes its temporary folder. Each step runs even when one before it
failed (the failure is printed to stderr). While the block runs, SIGTERM (``timeout``, ``kill``) raises
``SystemExit(143)`` and SIGINT ``KeyboardInterrupt`` in the main thread, so the bench's ``with`` and ``finally``
blocks run and then this teardown; a second signal during the teardown is ignored so it completes. A bench stopped
by a signal exits with 128 + the signal's number.
"""

from __future__ import annotations

import shutil
import signal
import sys
import tempfile
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.broker import QueueBook, StreamBroker, stream_broker

__all__ = ["BenchSession", "bench_session", "SIGNALS"]

#: the signals a session turns into exceptions while it is open
SIGNALS = (signal.SIGTERM, signal.SIGINT)


class BenchSession:
    """What a bench started and must end: its queue books, its Spark session, its brokers, its temporary folder.

    A context manager (:func:`bench_session`); :meth:`close` is the teardown (idempotent)."""

    def __init__(self, tmp_prefix: str | None = None) -> None:
        self._tmp_prefix = tmp_prefix
        self._workdir: Path | None = None
        self.books: list[QueueBook] = []
        self.sparks: list[Any] = []
        self.brokers: list[StreamBroker] = []
        #: the signal that ended the bench, if one did
        self.signalled: int | None = None
        self._closing = False  # from the teardown's start: signals are ignored
        self._closed = False
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> BenchSession:
        self.install_handlers()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        self._closing = True  # first: a signal from here on must not cut the teardown short
        try:
            # handlers are ours (ignoring) through the teardown, then back to what they were (Spark replaced SIGINT's)
            for signum in self._previous:
                signal.signal(signum, self._on_signal)
            self.close()
        finally:
            self.restore_handlers()
        if self.signalled is not None and exc is not None and not isinstance(exc, (SystemExit, KeyboardInterrupt)):
            # the signal's exception became another one on its way out (a py4j call failing as the JVM, which got
            # the same SIGTERM from `timeout`, goes away): the bench still ends as the signal asked
            raise SystemExit(128 + self.signalled) from exc

    # -- what the bench starts -------------------------------------------------------------------
    @property
    def workdir(self) -> Path:
        """The session's temporary folder (made on first use, under ``tmp_prefix``), removed at the end."""
        if self._workdir is None:
            self._workdir = Path(tempfile.mkdtemp(prefix=self._tmp_prefix or "sb-bench-"))
        return self._workdir

    def book(self, uri: str, run_id: str | None = None) -> QueueBook:
        """A :class:`QueueBook` on ``uri`` (run id: 6 random hex digits unless given), closed at the end."""
        book = QueueBook(uri, run_id or uuid.uuid4().hex[:6])
        self.books.append(book)
        return book

    def stream_broker(self, uri: str, port: int = 5552) -> StreamBroker:
        """:func:`bench.broker.stream_broker`; a throwaway broker it starts is stopped at the end."""
        broker = stream_broker(uri, port)
        self.brokers.append(broker)
        return broker

    def start_spark(self, delta_jars: str | None = None) -> Any:
        """:func:`bench.connector.start_spark` on :attr:`workdir`, stopped at the end."""
        from bench import connector as conn

        return self.keep_spark(conn.start_spark(self.workdir, delta_jars))

    def keep_spark(self, spark: Any) -> Any:
        """Stop ``spark`` (a SparkSession the bench built itself) at the end; returns it."""
        self.sparks.append(spark)
        return spark

    # -- the teardown ----------------------------------------------------------------------------
    def close(self) -> None:
        """Delete the books' queues and close them, stop Spark, stop the brokers the session started, remove the
        temporary folder; every step is tried, a failure is printed to stderr. Signals are ignored meanwhile."""
        self._closing = True
        if self._closed:
            return
        self._closed = True
        steps: list[tuple[str, Callable[[], None]]] = []
        steps += [(f"deleting the queues {book.prefix}-*", book.close) for book in self.books]
        steps += [("stopping Spark", spark.stop) for spark in self.sparks]
        steps += [(f"stopping the broker at {broker.uri}", broker.stop) for broker in self.brokers]
        if self._workdir is not None:
            workdir = self._workdir
            steps.append((f"removing {workdir}", lambda: shutil.rmtree(workdir, ignore_errors=True)))
        for what, step in steps:
            try:
                step()
            except Exception as exc:  # noqa: BLE001 - the next steps must still run
                print(f"bench teardown: {what} failed: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)

    # -- signals ---------------------------------------------------------------------------------
    def _on_signal(self, signum: int, frame: object) -> None:
        name = signal.Signals(signum).name
        if self._closing:
            print(f"bench: {name} during the teardown, ignored so that it completes", file=sys.stderr, flush=True)
            return
        self.signalled = signum
        print(f"bench: {name}, tearing down (queues, Spark, the throwaway broker if one was started, the temporary "
              "folder)", file=sys.stderr, flush=True)
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise SystemExit(128 + signum)

    def install_handlers(self) -> None:
        """Turn SIGTERM/SIGINT into exceptions (main thread only: elsewhere Python cannot set handlers)."""
        if threading.current_thread() is not threading.main_thread():
            return
        for signum in SIGNALS:
            self._previous[signum] = signal.signal(signum, self._on_signal)

    def restore_handlers(self) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
        self._previous.clear()


def bench_session(tmp_prefix: str | None = None) -> BenchSession:
    """A :class:`BenchSession` to use in a ``with`` block (see the module's docstring)."""
    return BenchSession(tmp_prefix)
