"""How ``reel node`` learns it should stop: SIGTERM, SIGINT, SIGHUP, or a thread that found the
journal tampered.

The first signal asks for a drain; the second ends the process at once (exit 128 + the signal's
number). The signal handler takes no lock: Python runs it in the main thread between two
bytecodes, wherever that thread is, and a handler that set a ``threading.Event`` while the main
thread was inside that same event's ``wait()`` (which holds the event's plain lock for a few
bytecodes on each wake-up) waited for itself forever. That was a node that printed ``^C`` and
never drained (CI, on a loaded machine, Ctrl-C typed just after the ready line). So a request is
a flag and one byte written to a pipe the main thread waits on.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
from collections.abc import Callable

from actors.log_fields import fields

log = logging.getLogger("reel.node")

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
"""Signals that drain the node (SIGHUP: a hung-up terminal; SIGHUP's default would kill the
process on the spot, leaving node.json behind and signing no final checkpoint)."""


class Stopper:
    """The node's stop request. :meth:`install` the handlers from the main thread before anything
    opens, so a signal during start-up drains as soon as the node is up; :meth:`request` from
    any thread; :meth:`wait` in the main thread."""

    def __init__(self, give_back_terminal: Callable[[], None]) -> None:
        self.signal_name: str | None = None
        """The first signal's name (``SIGINT``), once one arrived."""
        self._requested = False
        self._give_back_terminal = give_back_terminal
        self._wake_read, self._wake_write = os.pipe()
        os.set_blocking(self._wake_read, False)
        os.set_blocking(self._wake_write, False)

    def install(self) -> None:
        for signum in STOP_SIGNALS:
            signal.signal(signum, self._on_signal)

    def request(self) -> None:
        """Ask the node to stop. Takes no lock: safe from a signal handler and from any thread."""
        self._requested = True
        with contextlib.suppress(OSError):  # full (a wake-up is pending anyway) or closed
            os.write(self._wake_write, b"\0")

    def wait(self, timeout: float) -> bool:
        """Sleep until a stop is requested or ``timeout`` passed; returns whether a stop was
        requested.

        Bounded, because Python runs a signal handler only in the main thread, and a signal the
        kernel delivered to another thread does not wake this one's ``select``: the handler
        runs (and writes the pipe) when this returns at the latest."""
        if not self._requested and self._wake_read >= 0:
            select.select([self._wake_read], [], [], timeout)
            with contextlib.suppress(OSError):
                os.read(self._wake_read, 64)
        return self._requested

    def close(self) -> None:
        """Release the pipe. The handlers stay (a late signal still finds one, and its write
        goes nowhere: the descriptors are forgotten before they are closed, so a number the
        process reuses is never written to)."""
        fds, self._wake_read, self._wake_write = (self._wake_read, self._wake_write), -1, -1
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)

    def _on_signal(self, signum: int, _frame: object) -> None:
        name = signal.Signals(signum).name
        if self.signal_name is None:
            self.signal_name = name
            self.request()
            return
        log.warning("stopping at once", extra=fields(signal=name, exit_code=128 + signum))
        for handler in logging.getLogger().handlers:
            handler.flush()
        self._give_back_terminal()
        os._exit(128 + signum)
