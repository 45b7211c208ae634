"""The node's stop request (transports.node.stopper) against signals at any bytecode."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

from transports.node.stopper import Stopper

REPO = Path(__file__).resolve().parents[3]

STORM = textwrap.dedent(
    """
    import os, random, signal, threading, time
    from transports.node.stopper import Stopper

    # The main thread polls without sleeping, so each signal lands while it runs Python
    # inside wait() (where a handler that took a lock the waiter holds waited for itself).
    for _ in range(400):
        stopper = Stopper(lambda: None)
        stopper.install()
        pid = os.getpid()
        delay = random.random() * 0.002

        def fire() -> None:
            time.sleep(delay)
            os.kill(pid, signal.SIGTERM)

        sender = threading.Thread(target=fire)
        sender.start()
        while not stopper.wait(0):
            pass
        sender.join()
        assert stopper.signal_name == "SIGTERM"
        stopper.close()
    print("drained every time")
    """
)


def test_a_signal_at_any_moment_of_the_wait_is_heard() -> None:
    done = subprocess.run(
        [sys.executable, "-c", STORM], cwd=REPO, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "drained every time\n"


def test_a_request_from_another_thread_wakes_the_wait_at_once() -> None:
    stopper = Stopper(lambda: None)
    try:
        threading.Timer(0.05, stopper.request).start()
        started = time.monotonic()
        assert stopper.wait(30) is True
        assert time.monotonic() - started < 10
        assert stopper.signal_name is None  # requested, not signalled
    finally:
        stopper.close()
    assert stopper.wait(0) is True  # closed: still answers, never touches a reused descriptor
