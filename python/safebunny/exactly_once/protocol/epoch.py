"""A step's epoch, the streaming query's id, also over Spark Connect, where ``foreachBatch`` has no ``sparkContext``.

On a classic session the epoch is the query id, a local property of the query's thread. Over Spark Connect
it comes from, in order: the query's checkpoint (``StepSettings(checkpoint=...)``, the id in
``<checkpoint>/metadata``), the step's explicit ``epoch``, else a digest of the batch id and its sorted
message ids (one more Spark job per batch). Why each is safe: docs/databricks.md ("The step's epoch").
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from safebunny.errors import SafeBunnyError
from safebunny.spark.session import is_connect

__all__ = ["checkpoint_epoch", "content_epoch", "connect_epoch"]

#: the local property of a streaming query's thread that holds the query id (classic sessions)
QUERY_ID_PROPERTY = "sql.streaming.queryId"
#: prefix of an epoch derived from a batch's content (query ids are UUIDs, so the two never meet)
CONTENT_PREFIX = "batch-"


def checkpoint_epoch(checkpoint: str, node: str) -> str:
    """The query id kept in ``<checkpoint>/metadata`` (Spark writes it when the query first starts)."""
    from safebunny.storage.location import resolve_under

    filesystem, path = resolve_under(checkpoint, "checkpoint", "metadata")
    try:
        with filesystem.open_input_stream(path) as handle:
            text = handle.read().decode("utf-8")
    except (FileNotFoundError, OSError) as exc:
        raise SafeBunnyError(
            f"Step {node!r}: no streaming query metadata at '{path}' ({exc}). StepSettings(checkpoint=...) must be the "
            "same path as the query's option 'checkpointLocation'.") from None
    for line in text.splitlines():  # Spark writes one JSON object: {"id":"<query id>"}
        line = line.strip()
        if line.startswith("{"):
            query_id = json.loads(line).get("id")
            if query_id:
                return str(query_id)
    raise SafeBunnyError(f"Step {node!r}: '{path}' holds no query id ({text[:200]!r}); is it a Spark checkpoint?")


def content_epoch(batch_df: Any, batch_id: int, node: str) -> str:
    """An epoch from the batch's content: a digest of ``batch_id`` and its sorted message ids."""
    if "messageId" not in batch_df.columns:
        raise SafeBunnyError(
            f"Step {node!r} runs over Spark Connect, where a step's epoch cannot be read from the query; its "
            f"input has no 'messageId' column to derive one from (columns: {batch_df.columns}). Pass "
            "StepSettings(checkpoint=<the query's checkpointLocation>).")
    ids = batch_df.select("messageId").toArrow().column("messageId").to_pylist()
    digest = hashlib.sha256(f"{int(batch_id)}\n".encode())
    for mid in sorted("\0" if m is None else "\1" + m for m in ids):
        digest.update(mid.encode("utf-8", "surrogatepass") + b"\n")
    return CONTENT_PREFIX + digest.hexdigest()[:32]


def connect_epoch(batch_df: Any, batch_id: int | None, checkpoint: str | None, fixed: str | None,
                  node: str) -> str:
    """The epoch of a step's batch over Spark Connect (see the module's docstring for the order)."""
    if checkpoint:
        return checkpoint_epoch(checkpoint, node)
    if fixed:
        return fixed
    if batch_df is None or batch_id is None:
        raise SafeBunnyError(
            f"Step {node!r} runs over Spark Connect outside a streaming query, so it has no epoch. Run it through "
            "writeStream.foreachBatch, or pass StepSettings(checkpoint=...) or StepSettings(epoch=...).")
    return content_epoch(batch_df, batch_id, node)


def step_epoch(spark: Any, batch_df: Any, batch_id: int | None, checkpoint: str | None, fixed: str | None,
               node: str) -> str:
    """The epoch of step ``node``'s batch: the query id of the batch's thread (classic), else ``fixed``; over
    Spark Connect, :func:`connect_epoch`."""
    if is_connect(spark):  # no sparkContext in a Connect foreachBatch process
        return connect_epoch(batch_df, batch_id, checkpoint, fixed, node)
    epoch = spark.sparkContext.getLocalProperty(QUERY_ID_PROPERTY) or fixed
    if not epoch:
        raise SafeBunnyError(
            f"Step {node!r} runs outside a streaming query, so it has no epoch (the query id kept in "
            "the checkpoint). Run it through writeStream.foreachBatch, or pass StepSettings(epoch=...).")
    return epoch
