"""Processes a test starts (``reel node`` above all): however the test ends, they end with it.

A test that starts a node and then fails before the node's ready line (a node that exits, hangs
or prints something else) used to leave that ``reel node`` running for the rest of the suite,
holding its ports, its threads and its data dir's lock. :func:`spawned` is the one way the
suite starts one: the process lives for a ``with`` block, and on the way out, if the test did
not stop it itself, it is asked to stop (SIGINT, Ctrl-C's drain) and killed if it does not
within :data:`GRACE_S`. :func:`stop` is the graceful stop a test asserts on.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

REEL = Path(sys.executable).with_name("reel")
"""The ``reel`` command of the interpreter running the tests."""

GRACE_S = 10.0
"""How long a node left running by a failed test has to drain before it is killed."""


def stop(process: subprocess.Popen[Any], sig: int = signal.SIGINT, timeout: float = 60.0) -> int:
    """Send ``sig`` and wait for the exit code; a process that is still running after
    ``timeout`` is killed and the test fails (a stop must never hang the suite)."""
    if process.poll() is None:
        process.send_signal(sig)
    try:
        return process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise AssertionError(
            f"{process.args!r} did not stop within {timeout} s of {sig!r}"
        ) from None


@contextmanager
def spawned(argv: Sequence[str | Path], **popen: Any) -> Iterator[subprocess.Popen[Any]]:
    """``subprocess.Popen(argv, **popen)`` for the ``with`` block (stdin is /dev/null unless
    given): the process is stopped on the way out if it still runs, the ready line or not."""
    popen.setdefault("stdin", subprocess.DEVNULL)
    process = subprocess.Popen([str(a) for a in argv], **popen)
    try:
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(GRACE_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def node(*args: str | Path, **popen: Any) -> AbstractContextManager[subprocess.Popen[Any]]:
    """``reel node ARGS`` under :func:`spawned`."""
    return spawned([REEL, "node", *args], **popen)
