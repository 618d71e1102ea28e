"""A FUSE folder that behaves as a Unity Catalog volume, for the ``volume`` fixture (tests/conftest.py).

A passthrough (fusepy on Debian's libfuse2) of a backing folder, mounted under ``/Volumes/`` (where safebunny
takes a path for a volume), whose rename answers ENOSYS and whose hard link EPERM, as a volume's mount does
("Function not implemented", "Operation not permitted"); it refuses an append or a write that is not at the end of
what was written too (EOPNOTSUPP), since a volume takes files written whole. Every refused call is logged, one line
each, so a test can show that nothing tried one. The server runs in a process of its own
(``python volume_mount.py BACKING MOUNTPOINT LOG``): a Python callback in the test's own process would share its
GIL with the Spark session there.
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Volume", "mount", "why_not"]

VOLUMES = Path("/Volumes")


@dataclass(frozen=True)
class Volume:
    """A mounted volume: ``path`` under /Volumes, its ``backing`` folder, and the ``log`` of refused calls."""

    path: Path
    backing: Path
    log: Path

    def refused(self) -> list[str]:
        """The calls the mount refused (``rename a b``, ``link a b``, ``append a``, ``seek-write a``), in order."""
        return self.log.read_text().splitlines() if self.log.exists() else []


def why_not() -> str | None:
    """Why no volume can be mounted here (no /dev/fuse, no libfuse2 or fusepy, not root), or None."""
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse on this machine (a container without FUSE)"
    try:
        import fuse  # noqa: F401 - fusepy; loads libfuse.so.2
    except (ImportError, OSError) as exc:
        return f"fusepy or Debian's libfuse2 missing ({exc}): `make fuse` and `pip install fusepy`"
    if os.geteuid() != 0:
        return "mounting under /Volumes needs root"
    return None


@contextlib.contextmanager
def mount(workdir: Path) -> Iterator[Volume]:
    """Mount a volume backed by ``workdir/backing`` at ``/Volumes/safebunny_test/<id>``, unmount it after."""
    backing, log = workdir / "backing", workdir / "refused.log"
    backing.mkdir(parents=True, exist_ok=True)
    point = VOLUMES / "safebunny_test" / uuid.uuid4().hex[:10]
    point.mkdir(parents=True)
    server = subprocess.Popen([sys.executable, __file__, str(backing), str(point), str(log)],
                              stdout=subprocess.DEVNULL, stderr=open(workdir / "fuse.log", "wb"))  # noqa: SIM115
    try:
        deadline = time.monotonic() + 30
        while not os.path.ismount(point):
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the FUSE volume did not mount: {(workdir / 'fuse.log').read_text()[-2000:]}")
            time.sleep(0.05)
        yield Volume(point, backing, log)
    finally:
        subprocess.run(["umount", "-l", str(point)], check=False, capture_output=True)
        with contextlib.suppress(subprocess.TimeoutExpired):
            server.wait(timeout=10)
        if server.poll() is None:
            server.kill()
            server.wait()
        for folder in (point, point.parent, VOLUMES):  # what the fixture made, when nothing else is in it
            with contextlib.suppress(OSError):
                folder.rmdir()


def _serve(backing: str, point: str, log: str) -> None:
    from fuse import FUSE, FuseOSError, Operations

    def refuse(code: int, *what: str) -> FuseOSError:
        with open(log, "a") as f:
            f.write(" ".join(what) + "\n")
        return FuseOSError(code)

    class Passthrough(Operations):
        def __init__(self) -> None:
            self.root = os.path.realpath(backing)

        def _full(self, path: str) -> str:
            return os.path.join(self.root, path.lstrip("/"))

        def access(self, path, mode):  # type: ignore[no-untyped-def]
            if not os.access(self._full(path), mode):
                raise FuseOSError(errno.EACCES)

        def getattr(self, path, fh=None):  # type: ignore[no-untyped-def]
            st = os.lstat(self._full(path))
            return {k: getattr(st, k) for k in ("st_atime", "st_ctime", "st_gid", "st_mode", "st_mtime", "st_nlink",
                                                "st_size", "st_uid")}

        def readdir(self, path, fh):  # type: ignore[no-untyped-def]
            return [".", "..", *os.listdir(self._full(path))]

        def statfs(self, path):  # type: ignore[no-untyped-def]
            st = os.statvfs(self._full(path))
            return {k: getattr(st, k) for k in ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree",
                                                "f_files", "f_flag", "f_frsize", "f_namemax")}

        def chmod(self, path, mode):  # type: ignore[no-untyped-def]
            return os.chmod(self._full(path), mode)

        def chown(self, path, uid, gid):  # type: ignore[no-untyped-def]
            return os.chown(self._full(path), uid, gid)

        def utimens(self, path, times=None):  # type: ignore[no-untyped-def]
            return os.utime(self._full(path), times)

        def mkdir(self, path, mode):  # type: ignore[no-untyped-def]
            return os.mkdir(self._full(path), mode)

        def rmdir(self, path):  # type: ignore[no-untyped-def]
            return os.rmdir(self._full(path))

        def unlink(self, path):  # type: ignore[no-untyped-def]
            return os.unlink(self._full(path))

        def rename(self, old, new):  # type: ignore[no-untyped-def]
            raise refuse(errno.ENOSYS, "rename", old, new)

        def link(self, target, source):  # type: ignore[no-untyped-def]
            raise refuse(errno.EPERM, "link", source, target)

        def symlink(self, target, source):  # type: ignore[no-untyped-def]
            raise refuse(errno.EPERM, "symlink", source, target)

        def open(self, path, flags):  # type: ignore[no-untyped-def]
            if flags & os.O_APPEND:
                raise refuse(errno.EOPNOTSUPP, "append", path)
            return os.open(self._full(path), flags)

        def create(self, path, mode, fi=None):  # type: ignore[no-untyped-def]
            return os.open(self._full(path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)

        def read(self, path, size, offset, fh):  # type: ignore[no-untyped-def]
            return os.pread(fh, size, offset)

        def write(self, path, data, offset, fh):  # type: ignore[no-untyped-def]
            if offset != os.fstat(fh).st_size:  # a volume writes a file from its start to its end, once
                raise refuse(errno.EOPNOTSUPP, "seek-write", path)
            return os.pwrite(fh, data, offset)

        def truncate(self, path, length, fh=None):  # type: ignore[no-untyped-def]
            with open(self._full(path), "r+b") as f:
                f.truncate(length)

        def flush(self, path, fh):  # type: ignore[no-untyped-def]
            return 0

        def fsync(self, path, datasync, fh):  # type: ignore[no-untyped-def]
            return os.fsync(fh)

        def release(self, path, fh):  # type: ignore[no-untyped-def]
            return os.close(fh)

    FUSE(Passthrough(), point, foreground=True, nothreads=False)


if __name__ == "__main__":
    _serve(*sys.argv[1:4])
