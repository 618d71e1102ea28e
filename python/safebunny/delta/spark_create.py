"""A write through Spark Delta that may create its table by name, and the take-over of a create cut short after its
first commit (docs/exactly-once.md, "A create by name cut short by a kill").

A create by name (``saveAsTable``) commits version 0 at the table's location before the catalog has the name: a
driver killed between the two leaves a log no name points to, and every later create is refused. :func:`write`
answers that refusal by registering the log under the name (:func:`adopt`), only when every commit there is one of
safebunny's (tagged :func:`~safebunny.delta.commit_tags.commit_tag`), and writes again.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from safebunny.delta.commit_tags import parse_tag
from safebunny.delta.spark_sql import quote_name
from safebunny.delta.spark_table import SparkTable
from safebunny.delta.target import is_path
from safebunny.errors import SafeBunnyError

log = logging.getLogger("safebunny.delta")

__all__ = ["write", "adopt", "orphan_location"]

_ORPHAN_ERROR = "DELTA_CREATE_TABLE_WITH_NON_EMPTY_LOCATION"


def orphan_location(message: str) -> str | None:
    """The location Delta names in its refusal to create a table by name where a log is already (a create killed
    after its first commit, before the catalog had the name); None for any other error."""
    if _ORPHAN_ERROR not in message:
        return None
    found = re.search(r"location \('([^']+)'\)", message)
    return found[1] if found else ""


def write(target: SparkTable, writer: Any) -> None:
    """Run ``writer`` (a ``DataFrameWriter``) into ``target``'s table: by path, or by name, creating the table when it
    has none; a create refused for the log a create cut short left there takes that log over and writes again."""
    if is_path(target.table):
        writer.save(target.table)
        return
    try:
        writer.saveAsTable(target.table)
    except Exception as exc:  # noqa: BLE001 - only a create that found its own first commit is answered here
        location = orphan_location(str(exc))
        if location is None:
            raise
        adopt(target, location, exc)
        writer.saveAsTable(target.table)  # into the table now named; Delta skips the commit if it is that one


def adopt(target: SparkTable, location: str, exc: BaseException) -> None:
    """Register the log a killed create left at ``location`` under ``target``'s name. Adopted only when every commit
    there is one of ours: that commit is a batch's effect or marker whose replay then finds it in the history and
    skips it, so nothing is lost or applied twice. Anything else raises :class:`SafeBunnyError` saying what to do."""
    table = target.table
    what = (f"{target.what} {table!r} does not exist by name, but its location {location or '(unknown)'!r} "
            "holds a Delta log")
    if not location:
        raise SafeBunnyError(f"{what}, and Delta's error does not say where ({exc}). Find the table's folder in "
                             "the schema's location; remove it if nothing needs it, then restart.") from exc
    spark = target.spark(write=True)
    ref = f"delta.`{location.replace('`', '``')}`"
    try:
        tags = [row[0] for row in spark.sql(f"DESCRIBE HISTORY {ref}").select("userMetadata").collect()]
    except Exception as read:  # noqa: BLE001 - an unreadable log is not adopted
        raise SafeBunnyError(f"{what} that could not be read ({type(read).__name__}: {read}). Look at that folder: "
                             "remove it if nothing needs it, or register it with CREATE TABLE "
                             f"{quote_name(table)} USING delta LOCATION '<folder>', then restart.") from exc
    foreign = [tag for tag in tags if parse_tag(tag) is None]
    if not tags or foreign:
        raise SafeBunnyError(
            f"{what} with {len(foreign)} of its {len(tags)} commit(s) not made by safebunny, so it is not taken "
            f"over. If that table is the one meant, register it: CREATE TABLE {quote_name(table)} USING "
            f"delta LOCATION '{location}'; if not, remove the folder. Then restart.") from exc
    log.warning("%s: a create of it was cut short after its first commit (%d commit(s) of safebunny there); "
                "registering that log under the name", what, len(tags))
    escaped = location.replace("\\", "\\\\").replace("'", "\\'")
    spark.sql(f"CREATE TABLE IF NOT EXISTS {quote_name(table)} USING delta LOCATION '{escaped}'")
