"""Unity Catalog volumes (``/Volumes/...``): refused for delta-rs tables and a saga's root, before any write.

A volume's path is a FUSE mount with no copy, hard link or rename-if-absent: delta-rs cannot commit there
(``write_deltalake`` fails with "Function not implemented (os error 38)", delta-rs#2540, after it has
written data files), and a saga's root holds its inbox, journals and the control files written by
temp-file-then-rename. So a delta-rs target (an effect table or an inbox given by path), and a saga's root,
under ``/Volumes/`` (also ``dbfs:/Volumes/``, ``file:/Volumes/``, or a relative path that resolves there)
fail at once with :class:`~safebunny.errors.SafeBunnyOptionError`, naming the path and the two forms that
work: the volume's cloud storage URI (its external location, ``s3://``, ``abfss://``, ``gs://``) with
delta-rs, or a Unity Catalog table by name through Spark Delta.
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
           "'s3://bucket/sagas/state', 'abfss://container@account.dfs.core.windows.net/sagas/state' or 'gs://...'), "
           "written with delta-rs")
    if option == "root":  # a saga's inbox is a delta-rs table under its root
        fix = f"Give the saga's root as {uri}."
    else:
        fix = (f"Use (1) {uri}, or (2) a Unity Catalog table by name (for example 'main.sagas.inbox'), written "
               "through Spark Delta (the session must have Delta, as on Databricks).")
    raise SafeBunnyOptionError(
        f"{what} is on a Unity Catalog volume: {path!r}. delta-rs cannot commit on a volume's FUSE mount (no "
        "copy, hard link or rename-if-absent: 'Function not implemented (os error 38)', delta-rs#2540), so "
        f"safebunny refuses it before writing anything. {fix} See docs/databricks.md, 'Where the files go'.",
        option)
