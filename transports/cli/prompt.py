"""Reading answers at ``reel chat``'s prompt: lines of file descriptor 0, and what no answer is.

``input()`` reads through ``sys.stdin``'s buffer, whose lock a reading thread holds until a line
or the end of input arrives. A prompt abandoned on such a thread (its approval decided elsewhere,
or timed out) then kills the interpreter at exit (``Fatal Python error: _enter_buffered_busy``)
or holds it until the pipe closes. :func:`read_line` reads the descriptor itself with
``os.read``: an abandoned read holds no lock, and the process exits when chat is done.

The end of input (``< /dev/null``, a closed pipe, a cron job) and a lost terminal (``EIO``, a
closed descriptor) are :class:`EOFError`: no answer, never a decision (the caller leaves the
approval pending, :data:`transports.cli.errors.EXIT_PENDING`).
"""

from __future__ import annotations

import os
import sys
import threading

NO_ANSWER_HELP = (
    "nobody answered at the prompt (end of input); nothing was decided: decide it in the "
    "console or with reel approvals approve|deny {approval_id}, else it times out"
)
"""What chat says about each approval it leaves pending."""


class _Lines:
    """Lines of one descriptor, read a chunk at a time; the rest of a chunk is kept for the
    next line (a pipe may deliver several answers at once)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buffer = b""
        self.ended = False
        self.lock = threading.Lock()

    def read(self) -> str:
        with self.lock:
            while b"\n" not in self.buffer and not self.ended:
                try:
                    chunk = os.read(self.fd, 4096)
                except OSError:  # EIO from a hung-up terminal, EBADF from a closed descriptor
                    chunk = b""
                if not chunk:
                    self.ended = True
                self.buffer += chunk
            if not self.buffer:
                raise EOFError
            line, _, self.buffer = self.buffer.partition(b"\n")
            return line.decode("utf-8", "replace").removesuffix("\r")


_stdin = _Lines(0)


def read_line(prompt: str) -> str:
    """Show ``prompt`` on stdout and read one line of fd 0 (without its newline); EOFError at
    the end of input or when the terminal is gone."""
    sys.stdout.write(prompt)
    sys.stdout.flush()
    try:
        return _stdin.read()
    except EOFError:
        sys.stdout.write("\n")  # what comes next starts a line of its own
        sys.stdout.flush()
        raise
