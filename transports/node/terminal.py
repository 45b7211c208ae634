"""Ctrl-C for the node alone when a wrapper shares its terminal (``make run``).

A terminal sends SIGINT to its whole foreground process group. Started from a shell, ``reel
node`` leads a group of its own and nothing changes. Started by ``make run``, it shares make's
group, and GNU make, on SIGINT, waits for its child and then kills itself with SIGINT whatever
the child's exit status (``fatal_error_signal`` in make's commands.c): ``make run`` ended with
"Interrupt" and a failure although the node had drained and exited 0.

So a node that finds itself in the terminal's foreground group, led by another process, moves to
a group of its own and makes it the terminal's foreground: Ctrl-C reaches the node only, and the
wrapper sees it exit (0 after a clean drain). The terminal goes back to the wrapper's group when
the node stops (if the node is killed instead, the shell takes the terminal back when the
wrapper ends). While it holds the terminal the node ignores Ctrl-Z: a stopped node in the
foreground would leave the terminal to nobody.

Only when standard input is that terminal: a test runner that captures stdin, a service manager
or a pipeline leaves the process group alone.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable

TERMINAL_FD = 0


def take_terminal() -> Callable[[], None]:
    """Lead a foreground process group of our own when a wrapper shares ours (see the module
    docstring); returns the function that gives the terminal back (a no-op when nothing was
    taken). Call from the main thread, before any other thread starts."""
    try:
        if not os.isatty(TERMINAL_FD):
            return _nothing
        group = os.getpgrp()
        if group == os.getpid() or os.tcgetpgrp(TERMINAL_FD) != group:
            return _nothing
        os.setpgid(0, 0)
    except OSError:
        return _nothing
    try:
        _make_foreground(os.getpgrp())
    except OSError:
        # A group of our own in the background would never hear Ctrl-C: go back.
        with contextlib.suppress(OSError):
            os.setpgid(0, group)
        return _nothing
    previous = signal.signal(signal.SIGTSTP, signal.SIG_IGN)

    def give_back() -> None:
        with contextlib.suppress(OSError):
            _make_foreground(group)
        signal.signal(signal.SIGTSTP, previous)

    return give_back


def _make_foreground(group: int) -> None:
    # A process outside the foreground group that sets it is sent SIGTTOU (and stopped) unless
    # it blocks that signal.
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTTOU})
    try:
        os.tcsetpgrp(TERMINAL_FD, group)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


def _nothing() -> None:
    """Nothing was taken: nothing to give back."""
