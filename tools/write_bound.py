"""How much one ``shell.run`` call may add to the workspace's file system.

rlimits bound one file's size, not a call: a program can write many files (300 MiB in one
approved call was seen) or millions of empty ones. There is no per-directory quota a sandbox
can set without file system support, so the supervisor measures what the workspace's file
system holds (``fstatvfs``: used blocks and used inodes, which ext4, XFS, btrfs, overlayfs and
tmpfs all update when data is written, before it reaches the disk) when the call starts and on
every poll of its loop, and stops the call once it has grown by more than ``shell_write_bytes``
or ``shell_write_files``. Growth is net (a call that deletes as much as it writes is not
stopped) and counts every writer of that file system during the call, so a call may be
stopped for another process's writes: the bound errs on the side of stopping. Between two
polls (50 ms) a fast writer can pass the bound by what it writes in that time; what it wrote
stays in the workspace, and the call fails with ``error_kind: limit`` naming the bound.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

__all__ = ["WriteBound"]


@dataclass
class WriteBound:
    """The file system's usage when a call started, and the growth it may not exceed."""

    fd: int
    """A descriptor of the workspace directory (any file on its file system)."""
    max_bytes: int
    max_files: int
    _bytes: int = 0
    _files: int = 0

    def __post_init__(self) -> None:
        self._bytes, self._files = self._used()

    def _used(self) -> tuple[int, int]:
        st = os.fstatvfs(self.fd)
        return (st.f_blocks - st.f_bfree) * st.f_frsize, st.f_files - st.f_ffree

    def exceeded(self) -> str | None:
        """Why the call must stop (one sentence naming the setting), or None."""
        used, files = self._used()
        if used - self._bytes > self.max_bytes:
            return (
                f"the call wrote more than shell_write_bytes ({self.max_bytes} bytes) "
                "to the workspace"
            )
        if files - self._files > self.max_files:
            return (
                f"the call created more than shell_write_files ({self.max_files} files) "
                "in the workspace"
            )
        return None
