"""CLI start-up: what a ``reel`` command costs, next to the interpreter's own start.

Every figure is measured in the same run, rounds alternating between the commands:

- ``ceiling``: ``python -c pass`` with this venv's interpreter (what any Python command costs
  before it imports anything);
- ``import``: ``python -c "import transports.cli.main"`` (the entry point every ``reel``
  command loads; a command's own module is imported only when it runs);
- ``help``: ``reel --help``;
- ``client``: ``reel tokens list`` against a running node (started by this script on a
  temporary data dir, on ports of the kernel's choosing; it finds it through ``node.json``);
- ``offline``: ``reel tokens list``, ``reel journal verify``, ``reel schedules list`` and
  ``reel tokens create`` (a writer: it opens the journal as the node does, then appends) on the
  same data dir once the node has stopped (they open the journal themselves).

Each figure is the median over ``--rounds`` of the wall time and of the CPU time (user + system,
from ``wait4``) of the child; the ratio is to the ceiling's median wall time. Targets (issue 23:
``reel --help`` and a client command against a running node) print PASS/MISS, never asserted.
Run: ``.venv/bin/python bench/cli_start.py`` (about a minute).
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BIN = Path(sys.executable).parent
REEL = BIN / "reel"
TARGET_S = 0.3
"""Issue 23: ``reel --help`` and a client command against a running node."""


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds of one run of ``argv``, which must exit 0."""
    start = time.perf_counter()
    child = subprocess.Popen(
        argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    assert child.stderr is not None
    errors = child.stderr.read().decode()
    child.stderr.close()
    if child.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {child.returncode}: {errors}")
    return wall, usage.ru_utime + usage.ru_stime


def measure(
    cases: dict[str, list[str]], env: dict[str, str], rounds: int
) -> dict[str, list[tuple[float, float]]]:
    """Each case once per round, in turn, so load changes touch every case alike."""
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in cases}
    for _ in range(rounds):
        for name, argv in cases.items():
            results[name].append(timed(argv, env))
    return results


def report(results: dict[str, list[tuple[float, float]]], ceiling: float) -> None:
    for name, runs in results.items():
        wall = statistics.median(w for w, _ in runs)
        cpu = statistics.median(c for _, c in runs)
        line = f"{name:<28} wall {wall * 1000:7.1f} ms  cpu {cpu * 1000:7.1f} ms"
        line += f"  {wall / ceiling:5.1f}x ceiling"
        if name in ("help", "client: tokens list"):
            line += f"  target < {TARGET_S} s: {'PASS' if wall < TARGET_S else 'MISS'}"
        print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if not k.startswith("REEL_")}
    env |= {"REEL_HTTP_PORT": "0", "REEL_GRPC_PORT": "0"}
    print(
        f"python {platform.python_version()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        node = subprocess.Popen(
            [str(REEL), "node", "--data", str(data)],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        try:
            assert node.stdout is not None
            ready = node.stdout.readline()
            if not ready.startswith("reel node ready"):
                raise SystemExit(f"no ready line from reel node: {ready!r}")
            online = measure(
                {
                    "ceiling": [sys.executable, "-c", "pass"],
                    "import": [sys.executable, "-c", "import transports.cli.main"],
                    "help": [str(REEL), "--help"],
                    "client: tokens list": [str(REEL), "tokens", "list", "--data", str(data)],
                },
                env,
                args.rounds,
            )
        finally:
            node.send_signal(signal.SIGINT)
            if node.wait(60) != 0:
                print(f"reel node exited {node.returncode}", file=sys.stderr)
        offline = measure(
            {
                "ceiling (offline rounds)": [sys.executable, "-c", "pass"],
                "offline: tokens list": [str(REEL), "tokens", "list", "--data", str(data)],
                "offline: journal verify": [str(REEL), "journal", "verify", "--data", str(data)],
                "offline: schedules list": [str(REEL), "schedules", "list", "--data", str(data)],
                "offline: tokens create": [
                    *(str(REEL), "tokens", "create", "--principal", "user:bench"),
                    *("--role", "viewer", "--data", str(data)),
                ],
            },
            env,
            args.rounds,
        )
    ceiling = statistics.median(w for w, _ in online["ceiling"])
    report(online, ceiling)
    report(offline, statistics.median(w for w, _ in offline["ceiling (offline rounds)"]))
    print(f"load at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
