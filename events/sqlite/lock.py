"""The writer lock: at most one process holds a journal for writing.

An advisory ``flock`` on ``<journal>.lock``; the holder writes its pid into the file so a second
process can name it. The kernel drops the lock when the holder dies (even by ``kill -9``), so a
stale pid in the file never blocks a restart.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from events.errors import JournalLocked, JournalUnavailable


class WriterLock:
    """Held from :meth:`acquire` until :meth:`release` (or process exit)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def acquire(self, what: str) -> None:
        """Take the lock or raise :class:`JournalLocked` naming the holder's pid."""
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise JournalUnavailable(
                f"cannot create lock file {self.path}: {exc.strerror}"
            ) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_pid(fd)
            os.close(fd)
            who = f"process {holder}" if holder else "another process"
            raise JournalLocked(
                f"{what} is held for writing by {who} (lock {self.path})", holder
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        """Drop the lock; idempotent."""
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        return int(text) if text else None
    except (OSError, ValueError):
        return None
