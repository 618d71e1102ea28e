"""The source's options (safebunny.options.source): the deprecated poll-window option is accepted and ignored."""

import logging

from safebunny.options import source


def test_trigger_interval_is_accepted_ignored_and_warned_about_once(caplog, monkeypatch):
    monkeypatch.setattr(source, "_warned", [])
    with caplog.at_level(logging.WARNING, logger="safebunny.source"):
        for _ in range(3):  # Spark parses the options in several places: one warning
            options = source.parse_source_options({"uri": "amqp://h", "queue": "q", "triggerintervalms": "1000"})
    assert "triggerIntervalMs" not in options and options["minBatchIntervalMs"] == 0
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
