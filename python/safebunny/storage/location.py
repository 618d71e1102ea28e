"""The pyarrow filesystem and path of a location, a local path or any URI pyarrow opens."""

from __future__ import annotations

import functools
import os

import pyarrow as pa
import pyarrow.fs as pafs

from safebunny.errors import SafeBunnyOptionError

__all__ = ["resolve_location", "resolve_under", "absolute_location", "is_object_store", "local_path"]


def resolve_location(location: str, option: str = "journalLocation") -> tuple[pafs.FileSystem, str]:
    """The pyarrow filesystem and path of a local path (made absolute against the working directory of the
    moment) or a URI pyarrow knows (``file://``, ``s3://``, ``gs://``, ``hdfs://``, ...); an error naming
    ``option`` when it is neither. A URI's filesystem is made once per process (an object store's is not free
    to make, and a source reads its pause file in every ``latestOffset``)."""
    try:
        return _from_uri(location)
    except (pa.ArrowInvalid, ValueError):
        if "://" in location:
            raise SafeBunnyOptionError(
                f"Option '{option}' is not a path or URI pyarrow can open: {location!r}.", option) from None
        return pafs.LocalFileSystem(), os.path.abspath(location)


@functools.lru_cache(maxsize=256)
def _from_uri(location: str) -> tuple[pafs.FileSystem, str]:
    return pafs.FileSystem.from_uri(location)


def resolve_under(location: str, option: str, *parts: str) -> tuple[pafs.FileSystem, str]:
    """The filesystem of ``location`` (as :func:`resolve_location`) and the path of ``parts`` below it."""
    filesystem, base = resolve_location(location, option)
    return filesystem, "/".join([base.rstrip("/"), *parts])


def absolute_location(location: str) -> str:
    """``location`` as a URI or an absolute local path (a relative path resolved here, against the working
    directory of the process that calls it: the driver's, before the location travels to other processes)."""
    if "://" in location or location.startswith("file:"):
        return location
    return os.path.abspath(os.path.expanduser(location))


def is_object_store(filesystem: pafs.FileSystem) -> bool:
    """Whether ``filesystem`` is an object store (S3, GCS, Azure, or one seen through a SubTree of them)."""
    if isinstance(filesystem, pafs.SubTreeFileSystem):
        return is_object_store(filesystem.base_fs)
    return filesystem.type_name in ("s3", "gcs", "abfs")


def local_path(location: str) -> str | None:
    """The path on this machine of ``location`` (a path, or a ``file://`` URI); None for a URI of another
    filesystem (an object store, HDFS), which ``os`` calls do not reach. The one place that tells them apart."""
    if location.startswith("file://"):
        return location.removeprefix("file://")
    return None if "://" in location else location
