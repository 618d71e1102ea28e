"""safebunny.spark.conf.use_local_checkpoints on the shared session: a queue query keeps its offset and commit
logs through Spark's FileSystem-based checkpoint file manager, resumes from them after a restart, and that
manager refuses to overwrite a batch's log file, as Spark's default does. (With both managers the refused
write's temporary file stays behind: the stream marks itself closed before the rename fails, so Spark's
``cancel()`` does nothing.)"""

from __future__ import annotations

import pytest

from helpers import publish_numbered, queue_totals
from helpers import wait_until as _wait
from safebunny.spark.conf import CHECKPOINT_FILE_MANAGER_KEY, LOCAL_CHECKPOINT_FILE_MANAGER

_DEFAULT_MANAGER = "org.apache.spark.sql.execution.streaming.checkpointing.FileContextBasedCheckpointFileManager"


def _run(spark, uri, queue, tmp_path, name):  # type: ignore[no-untyped-def]
    df = (spark.readStream.format("safebunny").option("uri", uri).option("queue", queue)
          .option("journalLocation", str(tmp_path / "journal")).option("maxMessagesPerTrigger", "100").load())
    q = (df.select("messageId").writeStream.format("parquet").option("path", str(tmp_path / "out"))
         .option("checkpointLocation", str(tmp_path / "cp")).queryName(name).trigger(availableNow=True).start())
    managers = {q._jsq.streamingQuery().offsetLog().fileManager().getClass().getName(),
                q._jsq.streamingQuery().commitLog().fileManager().getClass().getName()}
    q.awaitTermination(300)
    assert q.exception() is None
    return q, managers


def _logged(tmp_path, log: str) -> list[int]:
    return sorted(int(p.name) for p in (tmp_path / "cp" / log).iterdir() if p.name.isdigit())


def test_a_query_logs_through_the_filesystem_manager_and_resumes_from_its_checkpoint(
        spark, broker, amqp_uri, make_queue, tmp_path):
    assert spark.conf.get(CHECKPOINT_FILE_MANAGER_KEY) == LOCAL_CHECKPOINT_FILE_MANAGER
    queue = make_queue()
    publish_numbered(amqp_uri, queue, 250)
    first, managers = _run(spark, amqp_uri, queue, tmp_path, "ckpt_first")
    assert managers == {LOCAL_CHECKPOINT_FILE_MANAGER}
    first_batches = _logged(tmp_path, "offsets")
    assert [p["batchId"] for p in first.recentProgress if p["numInputRows"]] == [0, 1, 2]
    assert _logged(tmp_path, "commits") == first_batches  # every planned batch committed (the last one empty)
    _wait(lambda: queue_totals(broker, queue) == (0, 0), what="first run acked")

    publish_numbered(amqp_uri, queue, 150, start=250)
    second, _ = _run(spark, amqp_uri, queue, tmp_path, "ckpt_second")
    # the restart continued the logs after the first run's last batch instead of starting over
    resumed = first_batches[-1] + 1
    assert [p["batchId"] for p in second.recentProgress if p["numInputRows"]] == [resumed, resumed + 1]
    assert _logged(tmp_path, "commits") == _logged(tmp_path, "offsets")
    ids = [r.messageId for r in spark.read.parquet(str(tmp_path / "out")).collect()]
    assert sorted(ids) == sorted(f"m{i}" for i in range(400))  # every message once, none twice


@pytest.mark.parametrize("manager_class", [LOCAL_CHECKPOINT_FILE_MANAGER, _DEFAULT_MANAGER])
def test_the_filesystem_manager_refuses_to_overwrite_a_batch_file_as_the_default_does(spark, tmp_path,
                                                                                       manager_class):
    """Spark's offset and commit logs create each batch file with overwriteIfPossible=false and rely on a
    FileAlreadyExistsException when it exists (another query writing the same checkpoint)."""
    jvm = spark._jvm
    constructor = jvm
    for part in manager_class.split("."):
        constructor = getattr(constructor, part)
    manager = constructor(jvm.org.apache.hadoop.fs.Path(f"file://{tmp_path}"),
                          spark._jsparkSession.sessionState().newHadoopConf())
    batch = jvm.org.apache.hadoop.fs.Path(f"file://{tmp_path}/7")
    out = manager.createAtomic(batch, False)
    out.write(b"first")
    out.close()
    again = manager.createAtomic(batch, False)
    again.write(b"second")
    with pytest.raises(Exception, match="FileAlreadyExists"):
        again.close()
    assert (tmp_path / "7").read_bytes() == b"first"
