"""Helpers for the sandbox tests: is bubblewrap usable here, and which processes survived.

``make test`` sets ``REEL_REQUIRE_SANDBOX=1``: there, a machine where bubblewrap cannot run
fails the sandbox tests with the probe's reason instead of skipping them, so the hostile
cases can never silently not run in CI.
"""

from __future__ import annotations

import itertools
import os
import time
from pathlib import Path

import pytest

from tools import ToolsConfig
from tools.sandbox import Sandbox, probe
from tools.sandbox_user import sandbox_user

_counter = itertools.count()


def sandbox_reason() -> str | None:
    """None when shell.run's sandbox works with the default settings, else why not."""
    cfg = ToolsConfig()
    found = probe(
        cfg.shell_bwrap,
        search_path=cfg.shell_path,
        network=False,
        tmp_bytes=cfg.shell_tmp_bytes,
        hidden=(),
        user=sandbox_user(cfg.shell_uid, cfg.shell_gid),
    )
    return None if isinstance(found, Sandbox) else found


def require_sandbox() -> None:
    """Skip (or, under ``REEL_REQUIRE_SANDBOX=1``, fail) when bubblewrap cannot run here."""
    reason = sandbox_reason()
    if reason is None:
        return
    if os.environ.get("REEL_REQUIRE_SANDBOX") == "1":
        pytest.fail(f"REEL_REQUIRE_SANDBOX=1 but the sandbox cannot run: {reason}")
    pytest.skip(f"no usable bubblewrap: {reason}")


def unique_seconds() -> str:
    """A ``sleep`` argument no other process on the machine has: finds this test's sleepers."""
    return f"{900_000 + os.getpid() % 10_000 * 100 + next(_counter)}"


def survivors(marker: str) -> list[int]:
    """Host PIDs of live (not zombie) processes whose argv contains ``marker``."""
    found: list[int] = []
    want = marker.encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if want in argv and state not in ("Z", "X"):
            found.append(int(entry))
    return found


def wait_for_survivors(marker: str, timeout_s: float = 5.0) -> list[int]:
    """`survivors` once they appear (for tests that first prove the process ran)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = survivors(marker)
        if found:
            return found
        time.sleep(0.02)
    return []
