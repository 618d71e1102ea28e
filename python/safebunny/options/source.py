"""The options of the safebunny source (``spark.readStream.format("safebunny")``)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from safebunny.errors import SafeBunnyOptionError
from safebunny.options import (
    OptionSpec,
    option,
    option_specs,
    parse_bool,
    parse_choice,
    parse_int,
    parse_options,
    parse_str,
    spark_options,
    typed,
)
from safebunny.options.connection import CONNECTION_OPTIONS, ConnectionSettings, connection_settings

__all__ = ["SOURCE_OPTIONS", "SourceOptions", "QueueType", "StartingOffsets", "EndingOffsets",
           "parse_source_options", "parse_ending_offsets"]

QueueType = Literal["auto", "classic", "quorum", "stream"]
#: an offset number, or the first offset at or after ``{"timestamp": <epoch ms>}``
StartingOffsets = Literal["earliest", "latest"] | int | dict[str, int]
EndingOffsets = Literal["latest"] | int

log = logging.getLogger("safebunny.source")

#: the poll window's interval: accepted so that a query that sets it keeps running, ignored with one warning
DEPRECATED_TRIGGER_INTERVAL = "triggerIntervalMs"
_warned: list[bool] = []


def parse_ending_offsets(name: str, raw: str) -> EndingOffsets:
    """Parser of the batch-read option ``endingOffsets``: ``latest`` or an offset number (exclusive)."""
    value = str(raw).strip()
    if value.lower() == "latest":
        return "latest"
    if value.isdigit():
        return int(value)
    raise SafeBunnyOptionError(
        f"Option '{name}' must be 'latest' or a non-negative offset number (exclusive end), but got {value!r}.",
        name,
    )


def _starting_offsets(name: str, raw: str) -> StartingOffsets:
    """``earliest``, ``latest``, an offset number, or ``{"timestamp": <epoch ms>}``."""
    value = str(raw).strip()
    lower = value.lower()
    if lower in ("earliest", "latest"):
        return lower  # type: ignore[return-value]
    if lower.lstrip("-").isdigit():
        number = int(lower)
        if number < 0:
            raise SafeBunnyOptionError(f"Option '{name}' must not be negative, but got {value!r}.", name)
        return number
    if lower.startswith("timestamp:"):
        stamp = lower.split(":", 1)[1]
        if stamp.isdigit():
            return {"timestamp": int(stamp)}
    raise SafeBunnyOptionError(
        f"Option '{name}' must be 'earliest', 'latest', an offset number such as '1200', or "
        f"'timestamp:<epoch milliseconds>', but got {value!r}.",
        name,
    )


@dataclass(frozen=True)
class SourceOptions:
    """The source's options (:data:`SOURCE_OPTIONS`) as a typed value: each option is a field (its attribute is
    its name in snake_case, ``maxMessagesPerTrigger`` -> ``max_messages_per_trigger``), the connection's under
    ``connection``."""

    connection: ConnectionSettings
    queue: str = option(parse_str, values="queue name",
        doc="The queue to read. It must exist (declare it, or let the saga topology do it).")
    queue_type: QueueType = option(
        parse_choice("auto", "classic", "quorum", "stream"), "auto", values="`auto`, `classic`, `quorum`, `stream`",
        doc="How to read the queue. `auto` asks the broker; set it to skip the probe.")
    journal_location: str | None = option(parse_str, None, values="directory or URI",
        doc="Classic and quorum queues: where each batch's messages are written before its offset is "
            "returned, on storage every executor can read (a cloud URI such as `s3://...` on a cluster; not "
            "`/Volumes/...`). Required there.")
    reconnect_timeout_ms: int = option(parse_int(1), 60000, values="milliseconds",
        doc="Classic and quorum queues: how long a micro-batch waits for a lost connection to come back "
            "before the query fails with a clear error (a wrong password or a deleted vhost fails it after "
            "three refused attempts). An outage never ends an availableNow run as if it were complete.")
    pause_file: str | None = option(parse_str, None, values="file path",
        doc="Classic and quorum queues: a circuit breaker's control file. While it holds a time in the future"
            " (epoch seconds), the query takes nothing and returns its prefetched messages to the queue; it "
            "resumes by itself. `safebunny.Saga.pause` writes it.")
    available_now_await_file: str | None = option(parse_str, None, values="file path",
        doc="Classic and quorum queues, under `trigger(availableNow=True)`: the run does not end while this "
            "file is absent; it reads what arrives meanwhile, and once the file is there it reads what the "
            "queue holds then and ends. A query can so start beside the one that feeds it and end after it. "
            "`safebunny.Saga.drain` writes it once the steps feeding a step have ended; the run stops waiting"
            " for it after an hour.")
    max_messages_per_trigger: int | None = option(parse_int(1), None, values="integer >= 1",
        doc="At most this many messages per micro-batch (Spark's ReadMaxRows). Also bounds the prefetch "
            "(twice this, at most 65,535), so the reader's memory in messages. Unset, a batch takes what the "
            "reader holds when Spark asks, up to 32,768: small batches when the queue is quiet, large ones "
            "when a backlog waits.")
    max_bytes_per_trigger: int | None = option(parse_int(1), None, values="integer >= 1",
        doc="At most this many body bytes per micro-batch (Spark's ReadMaxBytes; a single larger message "
            "still makes a batch of one). Also bounds the reader's memory in bytes: it buffers at most about "
            "twice this (256 MiB when unset) plus one message, by lowering its prefetch to what that holds at"
            " the average body size seen, and by pausing its consumer when the buffer is full; nothing is "
            "requeued for it.")
    starting_offsets: StartingOffsets = option(
        _starting_offsets, "earliest", values="`earliest`, `latest`, offset, `timestamp:<ms>`",
        doc="Stream queues: where a new query starts. A restarted query resumes from its checkpoint.")
    ending_offsets: EndingOffsets = option(parse_ending_offsets, "latest", values="`latest`, offset",
        doc="Batch reads of stream queues (`spark.read`): where to stop (exclusive); `latest` is the tail "
            "when the read is planned.")
    min_partitions: int = option(parse_int(1), 1, values="integer >= 1",
        doc="Stream queues: split each batch's offset range into at least this many partitions.")
    fail_on_data_loss: bool = option(parse_bool, True, values="`true`, `false`",
        doc="Fail when a logged batch's journal is missing or retention removed requested stream offsets; "
            "`false` skips them with a loud warning.")
    include_headers: bool = option(parse_bool, False, values="`true`, `false`",
        doc="Add the `headers` column (map<string,string>; nested values as JSON).")
    poll_timeout_ms: int = option(parse_int(0), 1000, values="milliseconds",
        doc="How long one micro-batch waits for the first message when the queue is empty. Under a "
            "processing-time trigger keep it below the interval, so that an idle trigger ends in time.")
    single_active_consumer: bool = option(parse_bool, False, values="`true`, `false`",
        doc="Classic and quorum queues: the queue is declared with `x-single-active-consumer` (a sharded saga"
            " step's queue). The reader then never cancels and restarts its consumer, which would hand the "
            "queue to another consumer and, on a quorum queue, stall until the cancelled one's messages are "
            "acked: it consumes with its full prefetch (twice the batch size) from the start, so its memory "
            "is bounded in messages, not by a byte budget. `saga.run` sets it for shards.")
    min_batch_interval_ms: int = option(parse_int(0), 0, values="milliseconds, 0 for none",
        doc="Classic and quorum queues: the source paces the query itself, for a query with a zero trigger "
            "(`trigger(processingTime=\"0 seconds\")`): a batch with data starts no sooner than this after the "
            "previous one's first message was there, and then as soon as a message is there. Unlike a "
            "processing-time trigger, whose batches start at multiples of its interval in every query at "
            "once, chained queries then take an upstream's output when it arrives instead of at the next "
            "interval. `saga.run` sets it to its trigger's interval for its entry steps.")
    consumer_timeout_ms: int = option(parse_int(0), 1_800_000, values="milliseconds, 0 for none",
        doc="Classic and quorum queues: the broker's `consumer_timeout` (RabbitMQ's default is 30 minutes). A"
            " message waits for its ack about two batch durations (the prefetch holds two batches); the "
            "reader warns when that passes half of this. Whatever it is set to, two batches lost within five "
            "to the broker closing the channel for an overdue ack fail the query with a clear error.")
    heartbeat_seconds: int = option(parse_int(0), 30, values="seconds",
        doc="AMQP heartbeat of the reader's connection (0 disables).")
    stream_port: int = option(parse_int(0), 5552, values="port, 0 to disable",
        doc="Stream queues: the stream protocol port; 0 reads over AMQP 0-9-1 instead.")

    def spark_options(self) -> dict[str, str]:
        """These options as ``spark.readStream.format("safebunny").options(...)`` takes them (the password as its
        own ``password`` option, which Spark redacts in plans)."""
        return spark_options(SOURCE_OPTIONS, self.connection, self)


SOURCE_OPTIONS = (
    *CONNECTION_OPTIONS, *option_specs(SourceOptions),
    OptionSpec(DEPRECATED_TRIGGER_INTERVAL, parse_int(0), default=0, values="milliseconds",
               doc="Deprecated and ignored (one warning): it set a poll window for processing-time triggers, now "
                   "removed. Keep `pollTimeoutMs` below the trigger's interval, or run with "
                   "`trigger(processingTime=\"0 seconds\")` and `minBatchIntervalMs`, as `saga.run` does."),
)


def parse_source_options(raw: Mapping[str, str]) -> SourceOptions:
    """Validate the source's options (case-insensitive strings, as Spark passes them) into
    :class:`SourceOptions`; raises :class:`SafeBunnyOptionError` naming the option."""
    parsed = parse_options(raw, SOURCE_OPTIONS, role="source")
    if parsed.pop(DEPRECATED_TRIGGER_INTERVAL) and not _warned:
        _warned.append(True)  # once per process: Spark parses the options in several places
        log.warning("Option '%s' is deprecated and ignored. Keep 'pollTimeoutMs' below the trigger's interval, or "
                    "run the query with trigger(processingTime=\"0 seconds\") and 'minBatchIntervalMs' set to the "
                    "interval.", DEPRECATED_TRIGGER_INTERVAL)
    return typed(SourceOptions, parsed, connection=connection_settings(parsed))
