"""The tag every Spark Delta effect commit carries in its ``userMetadata`` (its app transaction, and the lock of a
table by name), and what a table's ``DESCRIBE HISTORY`` says through those tags: pure rules, tested without Spark,
that :mod:`.spark_delta` reads its histories with and :mod:`.spark_commits` tags its commits with
(docs/exactly-once.md, "The fence for tables by name")."""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from safebunny.errors import SafeBunnyError

__all__ = ["CLOCK_SLACK_SECONDS", "History", "applied_in_history", "commit_tag", "history_covers", "lock_in_history",
           "parse_tag", "versions_in_history"]

_TAG_PREFIX = "safebunny.txn "


#: ``(version, timestamp, userMetadata)`` rows of a table's ``DESCRIBE HISTORY``
History = list[tuple[int, Any, Any]]


def commit_tag(app_id: str, version: int, lock: tuple[str, int] | None = None) -> str:
    """The ``userMetadata`` of an effect commit: its app transaction, and the lock it carries (the commit's
    ``txnAppId``/``txnVersion``) if any, readable in the table's history."""
    tag = f"{_TAG_PREFIX}{app_id} {version}"
    return tag if lock is None else f"{tag} {lock[0]} {lock[1]}"


def parse_tag(value: Any) -> tuple[str, int, str | None, int | None] | None:
    """A tag's app id, version, lock app id and lock version (None: not a tag of this form)."""
    if not isinstance(value, str) or not value.startswith(_TAG_PREFIX):
        return None
    parts = value[len(_TAG_PREFIX):].split(" ")
    if len(parts) == 2 and parts[1].isdigit():
        return parts[0], int(parts[1]), None, None
    if len(parts) == 4 and parts[1].isdigit() and parts[3].isdigit():
        return parts[0], int(parts[1]), parts[2], int(parts[3])
    return None


def applied_in_history(user_metadata: Iterable[str | None], app_id: str, version: int) -> bool:
    """Whether the history's ``userMetadata`` values show ``app_id`` committed at ``version`` or later."""
    return any(tag is not None and tag[0] == app_id and tag[1] >= version for tag in map(parse_tag, user_metadata))


def lock_in_history(history: History, lock: str, table: str) -> int | None:
    """The version of the app transaction ``lock`` that ``table`` holds, from its history's tags (every commit
    carrying it is tagged so): the highest tagged; None when the history, kept whole (version 0 is there), has
    none. Log cleanup removes the oldest entries first, so a lock with any entry left has its last one; one with
    none in a cut history may still hold a version Delta would compare against: unknown, so this raises."""
    found = [tag[3] for tag in map(parse_tag, (entry[2] for entry in history))
             if tag is not None and tag[2] == lock and tag[3] is not None]
    oldest = min(history, key=lambda entry: entry[0], default=(0, None, None))
    if found or oldest[0] == 0:
        return max(found, default=None)
    raise SafeBunnyError(
        f"The history of the effect table {table!r} starts at version {oldest[0]} ({oldest[1]}) and holds no commit "
        f"of the step's lock {lock!r}: log cleanup (delta.logRetentionDuration) removed its last commit, so the "
        "version its next commit must carry is unknown and nothing is applied. Set the table property "
        "delta.logRetentionDuration longer than the step can go without writing this table; to go on, stop every "
        "driver of the step and append zero rows to the table with writer options txnAppId=<the lock>, "
        "txnVersion=<the table's version + 1: a lock moves by one per commit, so it never held as much> and "
        f"userMetadata='{_TAG_PREFIX}- 0 {lock} <that version>'.")


def versions_in_history(history: History, table: str, apps: Mapping[str, int],
                        since: Mapping[str, float] | None = None) -> dict[str, int | None]:
    """For each ``app -> version``: ``version`` when ``history`` holds it or a later one, else None; raises where
    the history was cut after ``since[app]`` and holds nothing of ``app`` (:func:`history_covers`)."""
    tags = [tag for _version, _at, tag in history]
    found = {app: version if applied_in_history(tags, app, version) else None for app, version in apps.items()}
    oldest = min(history, key=lambda entry: entry[0], default=None)  # all history_covers looks at
    for app, when in (since or {}).items():
        if found.get(app) is None and oldest is not None and not history_covers([oldest], when):
            raise SafeBunnyError(
                f"The history of the effect table {table!r} starts at version {oldest[0]} ({oldest[1]}), "
                f"after the batch that claimed these messages ({_utc(when)}): log cleanup "
                "(delta.logRetentionDuration) removed the commits that would tell whether it applied "
                f"{app!r}, so this is unknown and nothing is applied. Check the table for that batch's rows; "
                "if they are there or must be applied, remove its claim file under the step's state location "
                "(_claims) and restart. Keep delta.logRetentionDuration longer than a step can stay stopped.")
    return found


#: slack for the clocks of the driver that wrote a claim and of the storage that stamps the history
CLOCK_SLACK_SECONDS = 600.0


def history_covers(history: Sequence[tuple[int, Any, Any]], since: float) -> bool:
    """Whether ``history`` (``(version, timestamp, userMetadata)`` rows of ``DESCRIBE HISTORY``) holds every commit
    made after the unix time ``since``: nothing was ever cleaned (version 0 is there), or its oldest entry is older
    than ``since`` by more than :data:`CLOCK_SLACK_SECONDS`."""
    version, at, _tag = min(history, key=lambda entry: entry[0])
    if version == 0:
        return True
    stamp = at.timestamp() if isinstance(at, _dt.datetime) else float(at)  # PySpark gives naive local time
    return stamp <= since - CLOCK_SLACK_SECONDS


def _utc(when: float) -> str:
    return _dt.datetime.fromtimestamp(when, _dt.timezone.utc).isoformat(timespec="seconds")
