"""The notebooks under notebooks/ run end to end against the real broker and Spark."""

from pathlib import Path

import pytest

from notebook_runner import run_notebook, split_cells

NOTEBOOKS = sorted((Path(__file__).parents[2] / "notebooks").glob("*.py"))


def test_there_are_notebooks():
    assert NOTEBOOKS


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs(path, spark, amqp_uri, tmp_path):
    namespace = run_notebook(path, spark, {"uri": amqp_uri, "workdir": str(tmp_path)})
    assert "query" not in namespace or not namespace["query"].isActive
    for png in (tmp_path / "plots").glob("*.png") if "plots" in namespace else ():
        with open(png, "rb") as f:  # a real, non-empty image
            assert f.read(8) == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000, png
    if path.name.startswith("03"):
        assert list((tmp_path / "plots").glob("*.png")), "03_operations writes its plot as a PNG"
        # the saga page it shows: one HTML document, the shipping step's count as status gives it
        [page] = namespace["displayed"]
        assert page.startswith("<!DOCTYPE html>") and 'class="sb-timeline"' in page
        assert 'data-step="shipping.PaymentCharged" data-field="processed">300<' in page


def test_runner_rejects_unknown_magics(tmp_path, spark):
    nb = tmp_path / "nb.py"
    nb.write_text("# Databricks notebook source\n# MAGIC %sh\n# MAGIC ls\n")
    with pytest.raises(ValueError, match="not supported"):
        run_notebook(nb, spark)
    assert split_cells("# Databricks notebook source\nx = 1\n# COMMAND ----------\ny = 2\n") == ["x = 1", "y = 2"]
