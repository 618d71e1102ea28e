"""The README's option tables are generated from the option specs: they must not drift."""

from pathlib import Path

from safebunny.options.source import source_options_table

README = (Path(__file__).parents[2] / "README.md").read_text("utf-8")


def test_readme_has_the_current_source_options_table():
    assert source_options_table() in README


def test_readme_has_the_current_sink_options_table():
    from safebunny.options.sink import sink_options_table

    assert sink_options_table() in README
