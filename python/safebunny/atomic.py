"""Writing a small file whole or not at all, on any filesystem pyarrow knows.

On a local (or mounted) filesystem the bytes go to a temporary name beside the target, are flushed to
disk (``fsync``: a rename alone can survive a power cut that the data does not), and are renamed onto
the target, so a reader sees the old file or the new one, never half of one. An object store has no
atomic rename (pyarrow's ``move`` there is a copy and a delete), but a PUT is atomic by itself: the
object appears whole when the upload completes (one request, or a multipart upload's completion), so
there the bytes are written to the target directly.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from typing import Any

from pyarrow import fs as pafs

__all__ = ["write_atomically", "is_object_store"]


def write_atomically(filesystem: pafs.FileSystem, path: str, data: bytes | Callable[[Any], None],
                     durable: bool = True) -> None:
    """Write ``data`` to ``path`` (its folder created) through a temporary file and a rename; ``data`` is the
    bytes, or a function that writes them to the output stream it is given (a large Arrow stream is written
    without a copy in memory). ``durable=False`` skips the fsync, for records a power cut may lose
    (counters), never ones correctness rests on."""
    folder = path.rsplit("/", 1)[0]
    if folder:
        filesystem.create_dir(folder, recursive=True)
    if is_object_store(filesystem):  # a PUT is whole or absent; a "rename" there would not be atomic
        _write(filesystem, path, data)
        return
    tmp = f"{path}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    _write(filesystem, tmp, data)
    if durable and isinstance(filesystem, pafs.LocalFileSystem):
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    filesystem.move(tmp, path)


def _write(filesystem: pafs.FileSystem, path: str, data: bytes | Callable[[Any], None]) -> None:
    with filesystem.open_output_stream(path) as f:
        if callable(data):
            data(f)
        else:
            f.write(data)


def is_object_store(filesystem: pafs.FileSystem) -> bool:
    """Whether ``filesystem`` is an object store (S3, GCS, Azure, or one seen through a SubTree of them)."""
    if isinstance(filesystem, pafs.SubTreeFileSystem):
        return is_object_store(filesystem.base_fs)
    return filesystem.type_name in ("s3", "gcs", "abfs")
