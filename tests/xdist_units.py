"""How ``make test``'s two xdist workers share the suite: each test's tier markers (from its folder), its xdist unit
(the tests that must run on one worker together), and the order the tiers run in. ``tests/conftest.py``'s
collection hook calls :func:`mark_and_order`.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

__all__ = ["SHARED_FIXTURE_GROUPS", "drivers_unit", "mark_and_order"]

#: fixtures that start something costly once per process that uses them (a throwaway broker, a compile), and the
#: xdist group of the tests that use them: under ``make test``'s two workers those tests run on one worker, so it
#: starts once (a test is otherwise a unit of its own, and the two workers would each start it)
#: (the stream broker's: the drivers group, which test_stream_crash is in)
SHARED_FIXTURE_GROUPS = {"management_broker": "management-broker", "short_timeout_broker": "short-timeout-broker",
                         "offline_jar": "offline-jar", "stream_broker": "stream-broker"}


def drivers_unit(item: pytest.Item) -> str:
    """The xdist group of a test in a drivers file: its module when the module starts something once for its tests
    (a module-scoped fixture: a kill matrix, a shared JVM), else the test alone, so the two workers share the drivers
    tests and a long file is not one worker's tail."""
    defs = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
    if any(d and d[-1].scope == "module" for d in defs.values()):
        return f"drivers:{Path(str(item.fspath)).name}"
    return f"drivers:{item.nodeid}"


def mark_and_order(items: list[pytest.Item]) -> None:
    """Give each test its tier's markers (from its folder) and its xdist unit, then order the run tier by tier."""
    for item in items:
        if not item.get_closest_marker("xdist_group"):
            fixtures = getattr(item, "fixturenames", ())
            group = next((g for name, g in SHARED_FIXTURE_GROUPS.items() if name in fixtures), None)
            if group:
                item.add_marker(pytest.mark.xdist_group(group))
        parts = Path(str(item.fspath)).parts
        group = item.get_closest_marker("xdist_group")
        # the Delta Spark tier's tests are drivers tests too (most run drivers of their own; all run Delta Spark)
        if (group.args[:1] == ("drivers",)) if group else "delta_spark" in parts:
            item.add_marker(pytest.mark.xdist_group(drivers_unit(item)))
        if "integration" in parts:
            item.add_marker(pytest.mark.integration)
        elif "e2e" in parts or "delta_spark" in parts:
            if "delta_spark" in parts and not os.environ.get("SAFEBUNNY_TEST_DELTA_JARS"):
                raise pytest.UsageError("tests/delta_spark needs Delta Spark's jars and pyspark 4.2.0: run `make "
                                        "test-delta` (SAFEBUNNY_TEST_DELTA_JARS names the jars' folder)")
            item.add_marker(pytest.mark.integration)
            item.add_marker(pytest.mark.e2e)
    # tier by tier: unit, integration, then Spark's (they fail fast, and run beside the making of the run's JVM
    # archive, which the first Spark test waits for). Among Spark's, the files whose tests run drivers as processes of
    # their own (crash, takeover, log and cluster tests: ``pytestmark`` xdist group "drivers") go first: they are the
    # longest units, and :func:`drivers_unit` splits them so that under ``make test``'s two workers both take them
    # and neither is left with a long tail of them.

    def tier(item: pytest.Item) -> int:
        if not item.get_closest_marker("integration"):
            return 0
        if not item.get_closest_marker("e2e"):
            return 1
        group = item.get_closest_marker("xdist_group")
        return 2 if group and str(group.args[0]).startswith("drivers") else 3

    items.sort(key=tier)
