"""The source's options (safebunny.options.source): the deprecated poll-window option is accepted and ignored."""

import logging

from safebunny.options import source
from safebunny.options.connection import ConnectionSettings


def test_trigger_interval_is_accepted_ignored_and_warned_about_once(caplog, monkeypatch):
    monkeypatch.setattr(source, "_warned", [])
    with caplog.at_level(logging.WARNING, logger="safebunny.source"):
        for _ in range(3):  # Spark parses the options in several places: one warning
            options = source.parse_source_options({"uri": "amqp://h", "queue": "q", "triggerintervalms": "1000"})
    assert not hasattr(options, "trigger_interval_ms") and options.min_batch_interval_ms == 0
    warnings = [r.getMessage() for r in caplog.records if "triggerIntervalMs" in r.getMessage()]
    assert len(warnings) == 1
    assert "deprecated and ignored" in warnings[0] and "minBatchIntervalMs" in warnings[0]
    assert "pollTimeoutMs" in warnings[0]


def test_trigger_interval_unset_or_zero_warns_nothing(caplog, monkeypatch):
    monkeypatch.setattr(source, "_warned", [])
    with caplog.at_level(logging.WARNING, logger="safebunny.source"):
        source.parse_source_options({"uri": "amqp://h", "queue": "q"})
        source.parse_source_options({"uri": "amqp://h", "queue": "q", "triggerIntervalMs": "0"})
    assert not caplog.records


def test_the_typed_options_render_back():
    """SourceOptions renders back to the strings Spark passes: what a saga's queries build instead of option strings
    (the table is derived from its fields, with the deprecated option after them)."""
    assert [s.name for s in source.SOURCE_OPTIONS][-1] == source.DEPRECATED_TRIGGER_INTERVAL
    options = source.SourceOptions(ConnectionSettings("amqp://app:s3cret@h/%2F"), queue="q", queue_type="quorum",
                                   include_headers=True, max_messages_per_trigger=40,
                                   starting_offsets={"timestamp": 1700000000000}, single_active_consumer=True)
    rendered = options.spark_options()
    assert rendered == {"uri": "amqp://app@h/%2F", "password": "s3cret", "queue": "q", "queueType": "quorum",
                        "includeHeaders": "true", "maxMessagesPerTrigger": "40",
                        "startingOffsets": "timestamp:1700000000000", "singleActiveConsumer": "true"}
    assert source.parse_source_options(rendered) == options
