"""libfaketime for a process a test starts: its wall clock moved, its monotonic clock left alone.

Debian 12's libfaketime (0.9.10) breaks Python 3.11's waits: with the monotonic clock faked
``time.sleep`` hangs, with it left alone every timed wait fails ``EINVAL`` (3.11 sleeps with
``clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME)``; fixed upstream after 0.9.10). The PyPI
package ``libfaketime`` (python-libfaketime, pinned in the dev extra) ships a later build of
the library inside it (``vendor/libfaketime/src/libfaketime.so.1``). Preloaded with
``FAKETIME_DONT_FAKE_MONOTONIC=1`` it moves ``CLOCK_REALTIME`` and leaves Python 3.11's
``time.sleep``, ``threading`` waits, ``queue`` timeouts and ``asyncio`` sleeps measuring right
(as a machine whose clock is wrong does: its monotonic clock still counts true seconds).

Only this package's library is used, never a system one, so what runs is what is pinned. It is
built for x86-64 Linux: elsewhere ``ld.so`` ignores it and the clock is not moved, so a test must
check the clock its process reports, not trust the preload. ``make test`` sets
``REEL_REQUIRE_FAKETIME=1``: there a missing library fails the test instead of skipping it.

A process under this library starts without the shell sandbox (``REEL_TOOLS_SHELL_BWRAP``
pointed nowhere, so ``shell.run`` is unavailable there). The library's ``pthread_cond_init``
takes a process-wide rwlock of its own (``monotonic_conds_lock``); a fork while another thread
holds it copies it held, and a child that runs ``preexec_fn`` (the sandbox probe a root node
starts with) re-creates Python's GIL with ``pthread_cond_init`` first and waits forever: a
`reel node` printed nothing, about one start in 15 beside a CPU hog (``gdb`` on the child:
``PyOS_AfterFork_Child`` -> ``recreate_gil`` -> libfaketime's ``pthread_cond_init`` ->
``pthread_rwlock_wrlock``). Without the library ``pthread_cond_init`` takes no lock.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

LIBRARY = Path("vendor", "libfaketime", "src", "libfaketime.so.1")
"""Where python-libfaketime keeps its build of the library, inside its package."""


def library() -> Path | None:
    """The pinned package's ``libfaketime.so.1``, or None when it is not installed."""
    spec = importlib.util.find_spec("libfaketime")
    if spec is None or not spec.submodule_search_locations:
        return None
    found = Path(next(iter(spec.submodule_search_locations)), LIBRARY)
    return found if found.is_file() else None


def shifted(ahead_s: int) -> dict[str, str]:
    """This environment for a process whose wall clock runs ``ahead_s`` seconds ahead under
    libfaketime, without the shell sandbox (see the module docstring). Skips (or, under
    ``REEL_REQUIRE_FAKETIME=1``, fails) without the library."""
    found = library()
    if found is None:
        reason = "the libfaketime package (dev extra) is not installed"
        if os.environ.get("REEL_REQUIRE_FAKETIME") == "1":
            pytest.fail(f"REEL_REQUIRE_FAKETIME=1 but {reason}")
        pytest.skip(reason)
    preload = os.environ.get("LD_PRELOAD")
    return {
        **os.environ,
        "LD_PRELOAD": f"{found}:{preload}" if preload else str(found),
        "FAKETIME": f"{ahead_s:+d}s",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        "REEL_TOOLS_SHELL_BWRAP": "/nonexistent/bwrap",  # no probe: see the module docstring
    }
