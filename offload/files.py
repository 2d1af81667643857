"""Writing a file whole: readers, and modules that map the file, never see a partial or changed one.

``replace_file`` writes to a temporary file in the target's folder, flushes it to disk, and
renames it over the target (``os.replace``, atomic on POSIX and Windows). A process that has the
old file open or mapped (``offload.runtime.load`` maps a ``.pte``) keeps the old bytes: the
rename gives the path a new file instead of truncating the old one in place, which would end
such a process with SIGBUS on its next read, or change its answers silently.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterable


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def replace_file(path: str | os.PathLike, data: bytes | Iterable[bytes]) -> None:
    """Write ``data`` (bytes, or chunks of bytes) to ``path`` as a new file renamed over it.

    A symbolic link is followed (its target is replaced, as ``open(path, "wb")`` would write it);
    the new file keeps the mode of the file it replaces, or gets the default one of a new file.
    On failure the target is left as it was and the temporary file is removed.
    """
    target = os.path.realpath(os.fspath(path))
    folder = os.path.dirname(target)
    try:
        mode = os.stat(target).st_mode & 0o7777
    except FileNotFoundError:
        mode = 0o666 & ~_umask()
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(target)}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            for chunk in [data] if isinstance(data, bytes | bytearray | memoryview) else data:
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _sync_folder(folder)


def _sync_folder(folder: str) -> None:
    """Make the rename itself durable where the platform allows opening a folder (POSIX)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems do not sync folders; the rename has happened all the same
    finally:
        os.close(fd)
