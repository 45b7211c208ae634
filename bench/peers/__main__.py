"""Run reel and its peers on the same workload, alternated, and print the ratios (see
:mod:`bench.peers`)."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent.parent
HERE = Path(__file__).resolve().parent
CHILD_TIMEOUT_S = 1800.0
"""A child that has not printed its result by then fails the benchmark."""


@dataclass(frozen=True)
class Peer:
    """A system under test: the venv its children run in (None: reel's own) and its module."""

    name: str
    module: str
    lock: str | None = None
    """The pinned requirements (``bench/peers/<lock>``) its venv is made from."""

    def python(self, cache: Path) -> str:
        if self.lock is None:
            return sys.executable
        return str(
            ensure_venv(cache / self.lock.removesuffix(".txt"), HERE / self.lock) / "bin" / "python"
        )


REEL = Peer("reel", "reel_peer")
LANGGRAPH = Peer("langgraph", "langgraph_peer", "langgraph.txt")
AGENTS = Peer("agents", "agents_peer", "agents.txt")

CASES: dict[str, list[tuple[Peer, str]]] = {
    "single": [
        (REEL, "single"),
        (REEL, "full-single"),
        (LANGGRAPH, "single-fresh"),
        (AGENTS, "single-fresh"),
    ],
    "long": [(REEL, "single"), (LANGGRAPH, "single"), (AGENTS, "single")],
    "loop": [(REEL, "loop"), (LANGGRAPH, "loop"), (AGENTS, "loop")],
    "idle": [(REEL, "idle"), (LANGGRAPH, "idle"), (AGENTS, "idle")],
}
"""Each workload and the (system, case) pairs run for it, in one round's order (each round
rotates it, so no system always runs first or last). reel's one session is measured in both
``single`` and ``long``: its results are pooled."""


def ensure_venv(venv: Path, lock: Path) -> Path:
    """``venv`` made from ``lock`` with reel's interpreter, unless it already was (its
    ``.installed`` holds the lock's digest); a changed lock makes it again."""
    digest = hashlib.sha256(lock.read_bytes()).hexdigest()
    stamp = venv / ".installed"
    if stamp.is_file() and stamp.read_text() == digest:
        return venv
    shutil.rmtree(venv, ignore_errors=True)
    print(f"making {venv} from {lock.relative_to(REPO)} (once)", file=sys.stderr, flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run(
        [str(venv / "bin" / "pip"), "install", "--quiet", "--no-deps", "-r", str(lock)],
        check=True,
    )
    stamp.write_text(digest)
    return venv


def run_child(peer: Peer, case: str, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """One case in a fresh interpreter of ``peer``'s venv; its last line of output is the
    result. A failure or a timeout stops the benchmark with the child's error output."""
    folder = Path(tempfile.mkdtemp(prefix=f"{peer.name}-{case}-", dir=work))
    folder.chmod(0o700)
    command = [
        peer.python(args.cache),
        "-m",
        f"bench.peers.{peer.module}",
        case,
        "--dir",
        str(folder),
        "--runs",
        str(args.runs),
        "--sessions",
        str(args.sessions),
        "--runs-each",
        str(args.runs_each),
        "--idle",
        str(args.idle),
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        check=False,
        env=env,
        cwd=REPO,
        timeout=CHILD_TIMEOUT_S,
    )
    if done.returncode != 0:
        sys.stderr.write(done.stderr)
        raise RuntimeError(f"{peer.name} {case} failed with exit status {done.returncode}")
    shutil.rmtree(folder, ignore_errors=True)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def load() -> str:
    return " / ".join(f"{x:.2f}" for x in os.getloadavg())


def describe() -> str:
    done = subprocess.run(
        ["git", "-C", str(REPO), "describe", "--always", "--dirty"],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip() or "not a git checkout"


def median(results: list[dict[str, Any]], key: str) -> float:
    return float(statistics.median(r[key] for r in results))


def verdict(met: bool) -> str:
    return "PASS" if met else "MISS"


class Report:
    """The results by (system, case), each a list over rounds; prints medians and ratios."""

    def __init__(self) -> None:
        self.results: dict[tuple[str, str], list[dict[str, Any]]] = {}

    def add(self, peer: Peer, case: str, result: dict[str, Any]) -> None:
        self.results.setdefault((peer.name, case), []).append(result)

    def rate(self, name: str, case: str) -> float:
        return median(self.results[(name, case)], "runs_per_s")

    def p99(self, name: str, case: str) -> float:
        return median(self.results[(name, case)], "p99_s")

    def runs_rows(self, workload: str) -> None:
        for peer, case in CASES[workload]:
            rs = self.results.get((peer.name, case))
            if not rs:
                continue
            each = ", ".join(f"{r['runs_per_s']:.1f}" for r in rs)
            sync = f"   synchronous={rs[0]['synchronous']}" if "synchronous" in rs[0] else ""
            print(
                f"{peer.name:<10} {case:<13} {median(rs, 'runs_per_s'):8.1f} runs/s  "
                f"p50 {median(rs, 'p50_s') * 1000:7.1f} ms  "
                f"p99 {median(rs, 'p99_s') * 1000:7.1f} ms  "
                f"CPU {median(rs, 'cpu_ms_per_run'):5.1f} ms/run   rounds: {each}{sync}"
            )

    def idle_rows(self) -> None:
        for peer, case in CASES["idle"]:
            rs = self.results.get((peer.name, case))
            if not rs:
                continue
            r = rs[-1]
            delta = median(rs, "rss_after_mib") - median(rs, "rss_before_mib")
            print(
                f"{peer.name:<10} {r['sessions']:,} idle sessions: threads {r['threads_before']} "
                f"-> {r['threads_after']}   RSS {median(rs, 'rss_before_mib'):.0f} -> "
                f"{median(rs, 'rss_after_mib'):.0f} MiB ({delta:+.1f}, "
                f"{delta / r['sessions'] * 1000:.2f} MiB per 1,000)   fds {r['fds_before']} -> "
                f"{r['fds_after']}"
            )

    def ratio(self, what: str, reel: tuple[str, str], peer: tuple[str, str], target: float) -> None:
        """The ratio of the medians' runs/s, with each round's own ratio (the two ran back to
        back in it, so a load that drifts between rounds moves both)."""
        mine, theirs = self.rate(*reel), self.rate(*peer)
        rounds = ", ".join(
            f"{a['runs_per_s'] / b['runs_per_s']:.2f}"
            for a, b in zip(self.results[reel], self.results[peer], strict=False)
        )
        print(
            f"{verdict(mine / theirs >= target)}  {what}: {mine:.1f} / {theirs:.1f} = "
            f"{mine / theirs:.2f}x (target >= {target:g}x; by round {rounds})"
        )

    def targets(self) -> None:
        have = set(self.results)
        if {("reel", "single"), ("langgraph", "single-fresh"), ("agents", "single-fresh")} <= have:
            for name, label in (("langgraph", "LangGraph"), ("agents", "Agents SDK")):
                self.ratio(
                    f"1 session sequential, reel node vs {label} fresh thread/session per run",
                    ("reel", "single"),
                    (name, "single-fresh"),
                    1.5,
                )
        if {("reel", "single"), ("langgraph", "single"), ("agents", "single")} <= have:
            reel = self.rate("reel", "single")
            for name, label in (("langgraph", "LangGraph"), ("agents", "Agents SDK")):
                print(
                    f"info  1 session sequential, reel node vs {label} one thread/session "
                    f"(history grows): {reel / self.rate(name, 'single'):.2f}x"
                )
        if {("reel", "full-single"), ("agents", "single-fresh")} <= have:
            self.ratio(
                "1 session sequential, reel full composition vs Agents SDK fresh session",
                ("reel", "full-single"),
                ("agents", "single-fresh"),
                1.2,
            )
        if {("reel", "loop"), ("langgraph", "loop"), ("agents", "loop")} <= have:
            for name, label in (("langgraph", "LangGraph"), ("agents", "Agents SDK")):
                self.ratio(
                    f"closed loop, reel vs {label} runs/s",
                    ("reel", "loop"),
                    (name, "loop"),
                    3.0,
                )
                reel_p99, peer_p99 = self.p99("reel", "loop"), self.p99(name, "loop")
                print(
                    f"{verdict(reel_p99 <= peer_p99 / 3)}  closed loop, reel vs {label} p99: "
                    f"{reel_p99 * 1000:.0f} ms vs {peer_p99 * 1000:.0f} ms = "
                    f"{reel_p99 / peer_p99:.2f} (target <= 0.33)"
                )


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.peers", description=__doc__)
    parser.add_argument("--rounds", type=int, default=3, help="alternated rounds per case")
    parser.add_argument("--runs", type=int, default=500, help="runs of the sequential cases")
    parser.add_argument("--sessions", type=int, default=100, help="sessions of the closed loop")
    parser.add_argument("--runs-each", type=int, default=10, help="runs per closed-loop session")
    parser.add_argument("--idle", type=int, default=2000, help="sessions of the idle case")
    parser.add_argument(
        "--cases", default=",".join(CASES), help=f"comma-separated, of {', '.join(CASES)}"
    )
    parser.add_argument(
        "--cache",
        type=Path,
        default=REPO / ".cache" / "bench-peers",
        help="where the peers' venvs and the temporary files go",
    )
    args = parser.parse_args()
    workloads = [c for c in args.cases.split(",") if c]
    unknown = sorted(set(workloads) - set(CASES))
    if unknown:
        parser.error(f"--cases: unknown case {unknown[0]!r} (of {', '.join(CASES)})")
    args.cache = args.cache.resolve()
    args.cache.mkdir(parents=True, exist_ok=True)
    for peer in (LANGGRAPH, AGENTS):
        peer.python(args.cache)  # made before the clock starts
    work = Path(tempfile.mkdtemp(prefix="run-", dir=args.cache))
    print(
        f"reel {describe()} vs LangGraph and the OpenAI Agents SDK ({', '.join(workloads)}); "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {os.cpu_count()} CPUs; "
        f"load {load()}; {args.rounds} round(s), medians"
    )
    print(
        f"each run: one message, 2 model turns, 1 echo tool call, local deterministic models; "
        f"sequential cases {args.runs} runs; closed loop {args.sessions} sessions x "
        f"{args.runs_each} runs; idle {args.idle:,} sessions with one run each",
        flush=True,
    )
    report = Report()
    try:
        for round_ in range(args.rounds):
            for workload in workloads:
                pairs = CASES[workload]
                shift = round_ % len(pairs)
                for peer, case in pairs[shift:] + pairs[:shift]:
                    report.add(peer, case, run_child(peer, case, args, work))
            print(f"round {round_ + 1} done, load {load()}", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for workload in workloads:
        if workload == "idle":
            report.idle_rows()
        else:
            report.runs_rows(workload)
    report.targets()
    print(f"load at the end {load()}")


if __name__ == "__main__":
    main()
