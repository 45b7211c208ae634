"""A dependency missing from the environment (a venv made before it was added) is one line
naming the package and how to reinstall, exit 2: not an internal error."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

RUN = (
    "import sys; sys.modules['cedarpy'] = None; sys.argv = ['reel', *sys.argv[1:]]; "
    "from transports.cli.main import main; main()"
)


def test_a_missing_dependency_names_the_package_and_the_reinstall(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", RUN, "chat", "--local", "--new", "hello", "--data", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("reel: error:"), done.stderr
    assert "'cedarpy'" in lines[0] and "pip install -e ." in lines[0]


def test_a_module_of_reel_s_own_missing_stays_an_internal_error(tmp_path: Path) -> None:
    run = RUN.replace("sys.modules['cedarpy']", "sys.modules['actors.schedules.times']")
    done = subprocess.run(
        [sys.executable, "-c", run, "chat", "--local", "--new", "hello", "--data", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and "internal error" in done.stderr, done
