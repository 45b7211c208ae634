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
    libfaketime. Skips (or, under ``REEL_REQUIRE_FAKETIME=1``, fails) without the library."""
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
    }
