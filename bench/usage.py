"""What usage folding and budget checks cost a run: the same runs on a composed node
(``open_runtime``: the projector folding every view, the policy engine, the journal) with and
without them, alternated.

- ``off``: the node as it was before usage: no usage projection, no budget, and tool calls'
  ``context.usage_today`` left at zero (no read of the view).
- ``on``: the usage projection folded with the others, and three hard budgets plus a soft one
  that count every run (tokens per day, cost per month, runs per hour, on the runs' principal)
  but never trip: each run is checked before it is accepted and before each of its two turns
  (the second after waiting for the views to include the journal's head), and its tool call
  reads ``usage_today``.

Each phase runs in a child process of its own (``--phase``) on a fresh data dir, warms up with
one run, then drives ``--runs`` runs over ``--sessions`` sessions in a closed loop with
``bench/runs.py``'s driver (one ``echo`` tool call each: two turns), and waits for the views to
fold every event. It reports runs/s (first send to the views caught up) and the process's CPU
time per run (the projector's thread included). The parent alternates off and on for
``--rounds`` rounds and prints each round, the medians and on/off ratios, and the load average
before and after. Targets are printed as PASS/MISS, never asserted.

Run: ``.venv/bin/python bench/usage.py [--runs 400] [--sessions 8] [--rounds 6]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import projections  # noqa: E402
from actors.approvals.gate import ToolGate  # noqa: E402
from actors.budgets.config import Budget  # noqa: E402
from actors.budgets.guard import BudgetGuard  # noqa: E402
from bench.runs import Driver, cpu_s, warm_up  # noqa: E402
from policies import UsageToday  # noqa: E402
from projections import Embedder  # noqa: E402
from projections.base import Projection  # noqa: E402
from projections.usage import Price, UsageProjection, UsageTotals  # noqa: E402
from transports import runtime as composition  # noqa: E402
from transports.config import HttpConfig, NodeConfig, UsageSection  # noqa: E402

TARGET_RATIO = 1.02
"""Usage folding and the budget check add under 2% to a run (issue 26)."""
PRINCIPAL = "operator"
"""Who ``StartRun`` runs as by default: the principal the budgets count."""
BIG = 1e12


def budgets() -> dict[str, Budget]:
    """Three hard limits and a soft one on the runs' principal, none ever reached."""
    return {
        "tokens-day": Budget(
            scope="principal", subject=PRINCIPAL, measure="tokens", period="day", hard=BIG, soft=BIG
        ),
        "cost-month": Budget(
            scope="principal", subject=PRINCIPAL, measure="cost", period="month", hard=BIG
        ),
        "runs-hour": Budget(
            scope="principal", subject=PRINCIPAL, measure="runs", period="hour", hard=BIG
        ),
    }


def no_budgets(cfg: NodeConfig, gate: ToolGate, *_: object) -> BudgetGuard:
    """The node's guard without a usage view to count from: nothing is ever counted."""
    return BudgetGuard({}, {}, UsageTotals(), gate.roles_of)


def phase(variant: str, runs: int, sessions: int, work: Path) -> dict[str, Any]:
    """One measured phase in this process; returns its figures."""
    on = variant == "on"
    if not on:  # the projector as it was: every view but usage
        every = projections.all_projections

        def without_usage(embedder: Embedder | None = None) -> list[Projection]:
            return [p for p in every(embedder) if not isinstance(p, UsageProjection)]

        setattr(composition, "all_projections", without_usage)  # noqa: B010
        setattr(composition, "budget_guard", no_budgets)  # noqa: B010
        setattr(composition, "usage_totals", lambda _projector: UsageTotals())  # noqa: B010
    config = NodeConfig(
        http=HttpConfig(port=0),
        budgets=budgets() if on else {},
        usage=UsageSection(prices={"unknown": Price(input_per_mtok=1.0, output_per_mtok=2.0)}),
    )
    runtime = composition.open_runtime(work, config=config)
    try:
        if not on:  # as before usage: nothing checked, nothing read
            runtime.node.services.gate.usage_of = lambda _principal: UsageToday()
            runtime.node.services.budgets = None
        runtime.projector.wait_caught_up()
        warm_up(runtime.journal, runtime.node)  # type: ignore[arg-type]
        runtime.projector.wait_for(runtime.journal.head().position, 30)
        driver = Driver(runtime.journal, runtime.node, sessions, runs // sessions, None)  # type: ignore[arg-type]
        cpu0, wall0 = cpu_s(), time.perf_counter()
        driver.run()
        head = runtime.journal.head().position
        runtime.projector.wait_for(head, 60)
        wall, cpu = time.perf_counter() - wall0, cpu_s() - cpu0
        failed = [k for k, _, _ in driver.ended.values() if k != "run.completed"]
        if failed:
            raise RuntimeError(f"{len(failed)} runs did not complete ({failed[0]})")
        total = sessions * (runs // sessions)
        return {
            "variant": variant,
            "runs": total,
            "runs_per_s": total / wall,
            "cpu_ms_per_run": cpu * 1000 / total,
            "p50_ms": statistics.median(driver.latencies()) * 1000,
        }
    finally:
        runtime.close(5.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=400)
    parser.add_argument("--sessions", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--phase", choices=("on", "off"))
    parser.add_argument("--dir", type=Path)
    args = parser.parse_args()
    if args.phase:
        with tempfile.TemporaryDirectory(dir=args.dir) as work:
            figures = phase(args.phase, args.runs, args.sessions, Path(work) / "data")
        print(json.dumps(figures))
        return
    load_before = os.getloadavg()
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    rows: dict[str, list[dict[str, Any]]] = {"off": [], "on": []}
    for round_ in range(args.rounds):
        order = ("off", "on") if round_ % 2 == 0 else ("on", "off")
        for variant in order:
            command = [sys.executable, __file__, "--phase", variant, "--runs", str(args.runs)]
            command += ["--sessions", str(args.sessions)]
            if args.dir:
                command += ["--dir", str(args.dir)]
            out = subprocess.run(command, check=True, capture_output=True, text=True)
            figures = json.loads(out.stdout.strip().splitlines()[-1])
            rows[variant].append(figures)
            print(
                f"round {round_ + 1} {variant:>3}: {figures['runs_per_s']:7.1f} runs/s  "
                f"{figures['cpu_ms_per_run']:6.2f} ms CPU/run  p50 {figures['p50_ms']:6.1f} ms",
                flush=True,
            )
    load_after = os.getloadavg()

    def median(variant: str, key: str) -> float:
        return float(statistics.median(float(r[key]) for r in rows[variant]))

    rate = median("off", "runs_per_s") / median("on", "runs_per_s")
    cpu = median("on", "cpu_ms_per_run") / median("off", "cpu_ms_per_run")
    print(f"started {started}; load average before {load_before}, after {load_after}")
    print(
        f"median runs/s off {median('off', 'runs_per_s'):.1f}, "
        f"on {median('on', 'runs_per_s'):.1f}: time per run x{rate:.3f} "
        f"({'PASS' if rate < TARGET_RATIO else 'MISS'} < x{TARGET_RATIO})"
    )
    print(
        f"median CPU/run off {median('off', 'cpu_ms_per_run'):.2f} ms, on "
        f"{median('on', 'cpu_ms_per_run'):.2f} ms: x{cpu:.3f} "
        f"({'PASS' if cpu < TARGET_RATIO else 'MISS'} < x{TARGET_RATIO})"
    )


if __name__ == "__main__":
    main()
