"""Writing a file whole or not at all, on any filesystem pyarrow knows.

On a local (or mounted) filesystem the bytes go to a temporary name beside the target, are flushed to disk
(``fsync``: a rename alone can survive a power cut that the data does not) and renamed onto the target. An
object store has no atomic rename, but a PUT is atomic by itself, so there the bytes are written to the
target directly (docs/databricks.md, "Plain files on a store"). A Unity Catalog volume (``/Volumes/...``) is
written the same way: its FUSE mount has no rename and no hard link (:func:`writes_whole`).
:func:`write_if_absent` creates a file only when none exists: atomic on local and mounted filesystems, an
exclusive create on a volume, best effort on an object store.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from typing import Any

from pyarrow import fs as pafs

from safebunny.storage.location import is_object_store
from safebunny.storage.volumes import is_volume_path

__all__ = ["write_atomically", "write_if_absent", "writes_whole"]


def writes_whole(filesystem: pafs.FileSystem, path: str) -> bool:
    """Whether a file at ``path`` is written whole in place, never through a rename or a hard link: on an object
    store (a PUT is whole or absent) and on a Unity Catalog volume (whose mount has neither)."""
    return is_object_store(filesystem) or (isinstance(filesystem, pafs.LocalFileSystem) and is_volume_path(path))


def write_atomically(filesystem: pafs.FileSystem, path: str, data: bytes | Callable[[Any], None],
                     durable: bool = True) -> None:
    """Write ``data`` to ``path`` (its folder created) through a temporary file and a rename; ``data`` is the
    bytes, or a function that writes them to the output stream it is given (a large Arrow stream is written
    without a copy in memory). ``durable=False`` skips the fsync, for records a power cut may lose
    (counters), never ones correctness rests on."""
    folder = path.rsplit("/", 1)[0]
    if folder:
        filesystem.create_dir(folder, recursive=True)
    if writes_whole(filesystem, path):  # a PUT is whole or absent; a "rename" there would not be atomic
        _write(filesystem, path, data)
        return
    tmp = f"{path}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    _write(filesystem, tmp, data)
    if durable and isinstance(filesystem, pafs.LocalFileSystem):
        with open(tmp, "rb") as written:
            os.fsync(written.fileno())
    filesystem.move(tmp, path)


def _write(filesystem: pafs.FileSystem, path: str, data: bytes | Callable[[Any], None]) -> None:
    with filesystem.open_output_stream(path) as f:
        if callable(data):
            data(f)
        else:
            f.write(data)


def write_if_absent(filesystem: pafs.FileSystem, path: str, data: bytes) -> bool:
    """Create ``path`` holding ``data`` (synced) unless a file is there; True when this call created it.

    Locally (and on FUSE mounts such as ``/dbfs/``) it is atomic and the file is complete when it appears: a
    hard link of a synced temporary file, or an exclusive create where the mount has no hard links (a volume:
    that at once). On an object store the object is written when absent and read back: best effort against two
    writers in the same second."""
    if isinstance(filesystem, pafs.LocalFileSystem) and is_volume_path(path):
        return _create_exclusive(path, data)
    if isinstance(filesystem, pafs.LocalFileSystem):
        tmp = _write_synced(f"{path}.{uuid.uuid4().hex}.tmp", data)
        try:
            os.link(tmp, path)
            return True
        except FileExistsError:
            return False
        except OSError:  # no hard links here (some FUSE mounts): an exclusive create instead
            return _create_exclusive(path, data)
        finally:
            os.unlink(tmp)
    if filesystem.get_file_info(path).type != pafs.FileType.NotFound:
        return False
    _write(filesystem, path, data)
    with filesystem.open_input_stream(path) as f:
        return bool(f.read() == data)


def _create_exclusive(path: str, data: bytes) -> bool:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    _write_synced(fd, data)
    return True


def _write_synced(target: str | int, data: bytes) -> str | int:
    """Write ``data`` to a local path (created) or an open descriptor, fsync it, close it; returns ``target``."""
    with open(target, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    return target
