"""A class-data-sharing archive of Spark's classes, made once per test run, so every driver JVM the run starts
loads them mapped from one file instead of reading and verifying them from the jars.

The suite starts some forty driver JVMs (the shared session, the crash, takeover and log tests' driver scripts,
Spark Connect servers, local-cluster executors); most of a crash test's time is its drivers starting. Measured
here (``/tmp/cds/start.py``: a ``local[2]`` session and two small jobs, alternating, another Spark run beside
them): 18.5 and 18.6 s without the archive, 12.2 and 10.6 s with it. Making it costs one driver run of 35-60 s
with the dump at its exit, which runs beside the unit and integration tiers (``tests/conftest.py`` runs them
first).

``python tests/jvm_archive.py ARCHIVE`` is that run: a session as the driver scripts make it, a batch job, a
Python UDF, and a streaming query over a Python data source into ``foreachBatch`` (the classes every test
loads), then the JVM writes ARCHIVE as it exits (``-XX:ArchiveClassesAtExit``). A JVM given the archive with a
classpath it does not match (another PySpark) runs without it, as Java documents; ``-Xlog:cds=off`` keeps that
warning off the drivers' stderr, which some tests read. ``SAFEBUNNY_TEST_JVM_ARCHIVE=0`` turns it off. A pytest
killed with SIGKILL cannot clean up: its archiving process ends itself when its parent is gone, and the next run
removes the folder (it names its owner's pid). Under pytest-xdist the controller makes the one archive of the
run (:meth:`ArchiveRun.share`) and each worker waits for it (:class:`SharedArchive`): two archiving drivers at once
on 2 cores made each slower, and the drivers worker waits for its archive before its first test.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from safebunny.storage.lease import _process_alive, _process_start

__all__ = ["ArchiveRun", "SharedArchive", "archive_options"]

_QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"
_PREFIX = "safebunny-jvm-"
_OWNER = "owner.pid"  # the pytest process of the run that made the folder: its pid and start time
#: set by an xdist controller that makes the run's archive (inherited by its workers): the file that says what became
#: of it, written once its driver ended
RESULT_ENV = "SAFEBUNNY_TEST_JVM_ARCHIVE_RESULT"


def _remove_orphans() -> None:
    """Archives of runs whose pytest is gone (killed with SIGKILL, so it could not remove its own: 164 MB each)."""
    for folder in Path(tempfile.gettempdir()).glob(f"{_PREFIX}*"):
        try:
            pid, start = (folder / _OWNER).read_text().split()
            owner = int(pid)
        except (OSError, ValueError):
            continue  # not ours, or another run still writing its owner file
        if not _process_alive(owner, start):  # the library's liveness test: the pid, and not a reused one
            shutil.rmtree(folder, ignore_errors=True)


def _end_with_parent(parent: int) -> None:
    """In the archiving process: when the pytest that started it is gone, end it and its JVM (their own session)."""
    import threading

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os.killpg(os.getpgrp(), signal.SIGKILL)

    threading.Thread(target=watch, daemon=True).start()


class ArchiveRun:
    """The archiving driver as a process of its own, started at once (the unit and integration tiers run beside
    it: they start no JVM), waited for by the first test that needs Spark."""

    def __init__(self, jvm_options: str, timeout: float = 240.0) -> None:
        _remove_orphans()
        self.folder = Path(tempfile.mkdtemp(prefix=_PREFIX))
        (self.folder / _OWNER).write_text(f"{os.getpid()} {_process_start(os.getpid())}")
        self.path = self.folder / "spark.jsa"
        self.timeout = timeout
        self._started = time.monotonic()
        env = dict(os.environ, SPARK_SUBMIT_OPTS=f"{jvm_options} -XX:ArchiveClassesAtExit={self.path} {_QUIET}")
        self._process = subprocess.Popen([sys.executable, __file__, str(self.path), str(os.getpid())], env=env,
                                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                         start_new_session=True)

    def wait(self) -> tuple[Path | None, str]:
        """``(path, what happened)``; the path is ``None`` when no archive was made (the run goes on without)."""
        try:
            _, stderr = self._process.communicate(timeout=max(1.0, self.timeout - self.elapsed()))
        except subprocess.TimeoutExpired:
            os.killpg(self._process.pid, signal.SIGKILL)
            self._process.communicate()
            self.remove()
            return None, f"no JVM class archive: its driver ran over {self.timeout:g} s"
        if self._process.returncode != 0 or not self.path.exists():
            self.remove()
            return None, f"no JVM class archive: its driver ended with {self._process.returncode}: {stderr[-500:]}"
        return self.path, (f"JVM class archive {self.path} ({self.path.stat().st_size // 2**20} MB, made in "
                           f"{self.elapsed():.0f} s beside the tests before Spark's)")

    def share(self) -> Path:
        """For an xdist controller: wait for the archive in a thread of this process and write what became of it to
        a file beside the folder, whose path :data:`RESULT_ENV` hands to the workers (:class:`SharedArchive`)."""
        import threading

        result = self.folder.with_suffix(".result")

        def publish() -> None:
            path, said = self.wait()
            result.with_suffix(".tmp").write_text(json.dumps({"path": str(path) if path else None, "said": said}))
            result.with_suffix(".tmp").replace(result)

        threading.Thread(target=publish, daemon=True).start()
        return result

    def elapsed(self) -> float:
        return time.monotonic() - self._started

    def remove(self) -> None:
        if self._process.poll() is None:
            os.killpg(self._process.pid, signal.SIGKILL)
            self._process.wait()
        shutil.rmtree(self.folder, ignore_errors=True)
        for leftover in (self.folder.with_suffix(".result"), self.folder.with_suffix(".tmp")):
            leftover.unlink(missing_ok=True)


class SharedArchive:
    """In an xdist worker: the archive the controller makes (:meth:`ArchiveRun.share`), waited for by its result
    file. The controller removes it when the run ends."""

    def __init__(self, result: str, timeout: float = 300.0) -> None:
        self.result = Path(result)
        self.timeout = timeout

    def wait(self) -> tuple[Path | None, str]:
        deadline = time.monotonic() + self.timeout
        while not self.result.exists():
            if time.monotonic() > deadline:
                return None, f"no JVM class archive: the run's controller said nothing in {self.timeout:g} s"
            time.sleep(0.5)
        said = json.loads(self.result.read_text())
        return (Path(said["path"]) if said["path"] else None), said["said"] + " (shared by the workers)"

    def remove(self) -> None:
        """The controller's to remove."""


def archive_options(path: Path) -> str:
    """The JVM options that load ``path``."""
    return f"-XX:SharedArchiveFile={path} {_QUIET}"


def _archiving_run(parent: int) -> None:
    _end_with_parent(parent)
    sys.path.insert(0, str(Path(__file__).parent / "e2e"))
    from driver_session import driver_session
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
    from pyspark.sql.functions import udf

    class _Numbers(DataSource):
        @classmethod
        def name(cls) -> str:
            return "archive_numbers"

        def schema(self) -> str:
            return "n long"

        def streamReader(self, schema):  # type: ignore[no-untyped-def]
            return _Reader()

    class _Reader(DataSourceStreamReader):
        def initialOffset(self) -> dict:
            return {"n": 0}

        def latestOffset(self) -> dict:
            return {"n": 10}

        def partitions(self, start: dict, end: dict) -> list:
            return [InputPartition(0)]

        def read(self, partition):  # type: ignore[no-untyped-def]
            yield from ((i,) for i in range(10))

    spark = driver_session("safebunny-jvm-archive")
    spark.range(1000).selectExpr("sum(id)").collect()
    spark.createDataFrame([(1, "a")], "x int, y string").groupBy("y").count().collect()
    spark.range(10).select(udf(lambda v: v + 1, "long")("id")).collect()
    spark.dataSource.register(_Numbers)
    seen: list[int] = []
    checkpoint = tempfile.mkdtemp(prefix="safebunny-jvm-ck-")
    try:
        query = (spark.readStream.format("archive_numbers").load().writeStream
                 .foreachBatch(lambda df, _: seen.append(df.count()))
                 .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
        query.awaitTermination()
    finally:
        shutil.rmtree(checkpoint, ignore_errors=True)
    spark.stop()


if __name__ == "__main__":
    _archiving_run(int(sys.argv[2]))
