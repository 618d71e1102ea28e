"""The PySpark version check: what counts as 4.2 or newer, and what the error says."""

from __future__ import annotations

import logging

import pytest

from safebunny.errors import SafeBunnyError, SafeBunnySparkVersionError
from safebunny.spark.version import MINIMUM, check_version, parse_version, supported


@pytest.mark.parametrize(("version", "parsed"), [
    ("4.2.1", (4, 2, 1)), ("4.3.0", (4, 3, 0)), ("4.2.0.dev0", (4, 2, 0)), ("4.3.0rc1", (4, 3, 0)),
    ("4.2", (4, 2, 0)), ("4.2.0+databricks", (4, 2, 0)), ("10.0.1", (10, 0, 1)), (" 4.10.0", (4, 10, 0)),
])
def test_versions_are_read_from_their_leading_numbers(version: str, parsed: tuple[int, int, int]) -> None:
    assert parse_version(version) == parsed


@pytest.mark.parametrize("version", ["", "dev", "four.two", "4", "v4.2.0"])
def test_a_version_without_major_and_minor_is_unreadable(version: str) -> None:
    assert parse_version(version) is None
    assert supported(version) is None


@pytest.mark.parametrize(("version", "ok"), [
    ("4.2.0", True), ("4.2.1", True), ("4.2.0.dev0", True), ("4.3.0", True), ("4.4.0", True), ("5.0.0", True),
    ("4.10.0", True),  # compared as numbers, not text
    ("4.1.1", False), ("4.0.0", False), ("3.5.3", False), ("4.1.9.dev0", False),
])
def test_4_2_and_newer_are_supported(version: str, ok: bool) -> None:
    assert MINIMUM == (4, 2)
    assert supported(version) is ok


def test_an_older_pyspark_fails_naming_the_version_found_and_the_one_needed() -> None:
    check_version("4.2.0")  # no error
    with pytest.raises(SafeBunnySparkVersionError) as caught:
        check_version("4.1.1")
    error = caught.value
    assert isinstance(error, SafeBunnyError)
    assert (error.found, error.needed) == ("4.1.1", "4.2")
    message = str(error)
    assert "PySpark 4.1.1" in message and "4.2 or newer" in message and "safebunny[spark]" in message


def test_a_missing_pyspark_fails_saying_how_to_install_it() -> None:
    with pytest.raises(SafeBunnySparkVersionError, match=r"no 'pyspark' can be imported.*safebunny\[spark\]") as caught:
        check_version(None)
    assert caught.value.found is None


def test_an_unreadable_version_warns_and_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="safebunny.spark"):
        check_version("custom-build")
    assert "cannot read the PySpark version 'custom-build'" in caplog.text
