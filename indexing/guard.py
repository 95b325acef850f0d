"""What guards the writing of an index folder: one builder at a time, and a disk that refuses the write.

``store.atomic_folder`` wraps its build in both: a second builder of the same folder is refused while the first
holds its lock (it would delete the first one's temporary folder), and a read-only or full disk is one
``InputError`` naming the folder (the previous index is left as it was: the build only ever wrote its temporary).
"""

from __future__ import annotations

import errno
import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from cone.errors import InputError

# What the disk, not the program, decided: said in one line.
DISK_ERRORS = {errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EPERM, errno.EFBIG, errno.EIO}


def lock_file(target: Path) -> Path:
    """The lock beside ``target`` (hidden, so never listed as an index)."""
    return Path(target).parent / f".{Path(target).name}.lock"


@contextmanager
def builder_lock(target: Path) -> Iterator[None]:
    """Hold ``target``'s build lock (fcntl.flock: released by the kernel when the holder dies, so a killed build
    never leaves the folder locked); a second builder is refused at once. The holder removes the lock file when
    done; a builder that locked a file removed meanwhile tries again on the new one."""
    target = Path(target)
    path = lock_file(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(100):
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise InputError(f"{target}: another build is writing this index now; wait for it to finish") from None
        try:
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                break
        except FileNotFoundError:
            pass
        os.close(fd)  # the file its holder removed on leaving: lock the one now there
    else:
        raise InputError(f"{target}: could not take the build lock {path}")
    try:
        yield
    finally:
        with suppress(OSError):
            path.unlink()
        os.close(fd)


@contextmanager
def disk_errors(target: Path) -> Iterator[None]:
    """A read-only, full or forbidden disk while writing ``target``: one InputError naming it."""
    try:
        yield
    except OSError as exc:
        if exc.errno not in DISK_ERRORS:
            raise
        where = f" ({exc.filename})" if exc.filename else ""
        raise InputError(
            f"{target}: cannot write the index: {exc.strerror}{where}; any previous index is intact"
        ) from None
