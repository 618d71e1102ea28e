"""Unity Catalog volumes (``/Volumes/...``): refused for delta-rs tables, before any write.

A volume's FUSE mount has no copy, hard link or rename-if-absent, so delta-rs cannot commit there
(delta-rs#2540); :func:`refuse_volume`'s error says why and what works instead. safebunny's plain files may live
on a volume, each written whole (:func:`~safebunny.storage.writes.writes_whole`), once no delta-rs table goes
there: a saga with ``SagaSettings(tables=...)``, a step whose inbox is given by name.
"""

from __future__ import annotations

import os
import re

from safebunny.errors import SafeBunnyOptionError

__all__ = ["is_volume_path", "refuse_volume"]

# dbfs:/Volumes/..., dbfs:///Volumes/..., file:/Volumes/..., file:///Volumes/..., /Volumes/...
_SCHEME = re.compile(r"^(?:dbfs|file):/*", re.IGNORECASE)


def is_volume_path(path: str) -> bool:
    """True when ``path`` is on a Unity Catalog volume (a local path resolved against the working directory)."""
    if not path:
        return False
    rest = _SCHEME.sub("/", path, count=1)
    if "://" in rest:  # another scheme (s3://, abfss://, ...): the cloud URI, not the mount
        return False
    rest = os.path.abspath(os.path.expanduser(rest))
    return rest == "/Volumes" or rest.startswith("/Volumes/")


def refuse_volume(path: str, what: str, option: str) -> None:
    """Raise :class:`SafeBunnyOptionError` (for ``option``) when ``path`` is on a Unity Catalog volume;
    ``what`` names the thing (``"the effect table"``, ``"the saga's root"``) in the message."""
    if not is_volume_path(path):
        return
    uri = ("the cloud storage URI behind the volume (its external location, for example "
           "'s3://bucket/sagas/state', 'abfss://container@account.dfs.core.windows.net/sagas/state' or 'gs://...')")
    if option in ("table", "inbox"):  # a Delta table: by name through Spark Delta works too
        fix = (f"Use (1) {uri}, written with delta-rs, or (2) a Unity Catalog table by name (for example "
               "'main.sagas.inbox'), written through Spark Delta (the session must have Delta, as on Databricks).")
    elif option == "root":  # the saga's inbox and its other tables would be delta-rs tables under it
        fix = ("Keep the saga's Delta tables by name in a Unity Catalog schema, SagaSettings(tables='main.sagas') "
               f"(written through Spark Delta; the root may then be a volume), or give the root as {uri}.")
    else:  # a step's state: its row decisions are a delta-rs table there unless its inbox is given by name
        fix = (f"Give the step's inbox by name (for example 'main.sagas.inbox'; its state may then be a volume), "
               f"or give {what[:1].lower()}{what[1:]} as {uri}.")
    raise SafeBunnyOptionError(
        f"{what} is on a Unity Catalog volume: {path!r}, and a delta-rs table would be written there. delta-rs "
        "cannot commit on a volume's FUSE mount (no copy, hard link or rename-if-absent: 'Function not implemented "
        f"(os error 38)', delta-rs#2540), so safebunny refuses it before writing anything. {fix} See "
        "docs/databricks.md, 'Where each kind of state goes'.",
        option)
