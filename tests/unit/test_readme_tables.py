"""The option tables in docs/source.md and docs/sink.md are generated from the option specs: they must not drift."""

from pathlib import Path

from safebunny.options import options_table
from safebunny.options.source import SOURCE_OPTIONS

DOCS = Path(__file__).parents[2] / "docs"


def test_source_page_has_the_current_source_options_table():
    assert options_table(SOURCE_OPTIONS) in (DOCS / "source.md").read_text("utf-8")


def test_sink_page_has_the_current_sink_options_table():
    from safebunny.options.sink import SINK_OPTIONS

    assert options_table(SINK_OPTIONS) in (DOCS / "sink.md").read_text("utf-8")
