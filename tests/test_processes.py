"""tests/processes.py: a process started under :func:`spawned` does not outlive its block, even
when the test fails before the process said it was ready, and even when it ignores SIGINT."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests import processes

SILENT = "import time; time.sleep(120)"
"""A child that never prints a ready line (a node hanging at start)."""
STUBBORN = (
    "import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN);"
    " print('up', flush=True); time.sleep(120)"
)
"""A child that ignores Ctrl-C's SIGINT (a node stuck in its drain)."""


def test_a_child_that_never_got_ready_is_stopped_when_the_test_fails() -> None:
    with (
        pytest.raises(AssertionError, match="no ready line"),
        processes.spawned([sys.executable, "-c", SILENT], stdout=subprocess.PIPE) as child,
    ):
        raise AssertionError("no ready line")
    assert child.poll() is not None


def test_a_child_that_ignores_sigint_is_killed_after_the_grace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(processes, "GRACE_S", 0.5)
    with processes.spawned(
        [sys.executable, "-c", STUBBORN], stdout=subprocess.PIPE, text=True
    ) as child:
        assert child.stdout is not None and child.stdout.readline() == "up\n"
    assert child.returncode == -9


def test_stop_fails_the_test_rather_than_hang_on_a_child_that_will_not_stop() -> None:
    with processes.spawned(
        [sys.executable, "-c", STUBBORN], stdout=subprocess.PIPE, text=True
    ) as child:
        assert child.stdout is not None and child.stdout.readline() == "up\n"
        with pytest.raises(AssertionError, match=r"did not stop within 0\.5 s"):
            processes.stop(child, timeout=0.5)
        assert child.returncode == -9
