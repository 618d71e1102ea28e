"""Records kept in a folder, one file per record (a lease, a claim, a journaled batch), listed and
read back on any filesystem pyarrow knows. A record removed while the folder is listed is left out, never an
error: its writer removed it because nothing depends on it any more."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

from pyarrow import fs as pafs

__all__ = ["list_records", "read_record", "read_records", "remove_record"]

T = TypeVar("T")


def list_records(filesystem: pafs.FileSystem, folder: str, suffix: str = "") -> list[pafs.FileInfo]:
    """The files directly in ``folder`` whose names end with ``suffix`` (in the order the filesystem lists
    them); none when the folder does not exist."""
    try:
        infos = filesystem.get_file_info(pafs.FileSelector(folder, allow_not_found=True))
    except FileNotFoundError:
        return []
    return [info for info in infos if info.type == pafs.FileType.File and info.base_name.endswith(suffix)]


def read_records(filesystem: pafs.FileSystem, files: Iterable[pafs.FileInfo], parse: Callable[[bytes], T],
                 skip: tuple[type[Exception], ...] = ()) -> list[T]:
    """``parse`` of each file's bytes, in order; a file gone since it was listed, or whose ``parse`` raises one
    of ``skip`` (a foreign or half-written file), is left out."""
    out = []
    for info in files:
        data = read_record(filesystem, info.path)
        try:
            if data is not None:
                out.append(parse(data))
        except skip:
            continue
    return out


def read_record(filesystem: pafs.FileSystem, path: str) -> bytes | None:
    """The bytes of the file at ``path``; None when there is none."""
    try:
        with filesystem.open_input_stream(path) as f:
            return bytes(f.read())
    except FileNotFoundError:
        return None


def remove_record(filesystem: pafs.FileSystem, path: str) -> bool:
    """Delete the file at ``path``; False when it was gone already."""
    try:
        filesystem.delete_file(path)
    except FileNotFoundError:
        return False
    return True
