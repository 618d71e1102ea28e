"""Unity Catalog volumes (``/Volumes/...``): refused for delta-rs tables and safebunny's state, before any write.

A volume's FUSE mount has no copy, hard link or rename-if-absent, so delta-rs cannot commit there
(delta-rs#2540); :func:`refuse_volume`'s error says why and what works instead.
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
    else:  # a saga's root, a journal, a step's state: safebunny's own files and delta-rs tables
        fix = f"Give {what[:1].lower()}{what[1:]} as {uri}."
    raise SafeBunnyOptionError(
        f"{what} is on a Unity Catalog volume: {path!r}. delta-rs cannot commit on a volume's FUSE mount (no "
        "copy, hard link or rename-if-absent: 'Function not implemented (os error 38)', delta-rs#2540), and "
        "safebunny's own state is written there by temp-file-then-rename, so safebunny refuses it before writing "
        f"anything. {fix} See docs/databricks.md, 'Where each kind of state goes'.",
        option)
