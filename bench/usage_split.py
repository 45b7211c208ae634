"""What usage folding and budget checks cost, counted apart and without the scheduler's noise:
``bench/usage.py`` under callgrind counts a whole node, whose projector folds batches as large
as the threads' timing makes them (each batch pays a transaction whatever it holds), so two
counts of the same code differ by ±0.2 M instructions a run. Here each part runs alone, in
this process, with its batches fixed:

- ``make DIR``: one ``bench/usage.py`` phase (``on``: the usage view, the budgets) on a fresh
  node in ``DIR``, kept: the journal the other steps read (``--runs`` runs over 8 sessions).
- ``fold DIR on|off``: a fresh views.db folded from that journal by the node's projections with
  (``on``) or without (``off``) the usage view, ``--batch`` records a batch; its totals count
  the month for whom ``bench/usage.py``'s budgets count it (the principal), as a node with
  those budgets does, or with ``--sessions-too`` for sessions as well (a session budget).
- ``checks DIR on|off``: the budget checks a run makes (one before it is accepted, one at its
  second turn) with ``bench/usage.py``'s four budgets over the folded totals, once per run of
  the journal (``on``), or the loop alone (``off``).

Count each under ``valgrind --tool=callgrind`` and take on minus off over the runs: the fold's
and the checks' instructions per run. Prints what it did (a line of JSON).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import projections  # noqa: E402
from actors.budgets.decide import column_of  # noqa: E402
from actors.budgets.guard import BudgetGuard  # noqa: E402
from bench.usage import PRINCIPAL, budgets, phase  # noqa: E402
from events import JournalReader  # noqa: E402
from events.catalog import RunAccepted, RunTurnCompleted  # noqa: E402
from projections import Projector  # noqa: E402
from projections.usage import Price, UsageProjection  # noqa: E402

PRICES = {"unknown": Price(input_per_mtok=1.0, output_per_mtok=2.0)}


def fold(data: Path, on: bool, batch: int, sessions_too: bool) -> dict[str, int]:
    """Fold the journal into a fresh views.db, ``batch`` records a batch."""
    views = [p for p in projections.all_projections() if on or not isinstance(p, UsageProjection)]
    columns = {column_of(budget) for budget in budgets().values()}
    for view in views:
        if isinstance(view, UsageProjection):
            view.totals.count_for(columns | ({"session_id"} if sessions_too else set()))
    reader = JournalReader.open(data / "journal.db")
    with tempfile.TemporaryDirectory() as scratch:
        projector = Projector(reader, Path(scratch) / "views.db", views, batch=batch)
        try:
            events = projector.catch_up()
        finally:
            projector.close()
            reader.close()
    return {"events": events, "batch": batch}


def checks(data: Path, on: bool) -> dict[str, int]:
    """One refusal check and one turn-boundary check per run of the journal, as a node makes
    them, against the totals its usage view folds."""
    reader = JournalReader.open(data / "journal.db")
    usage = UsageProjection()
    with tempfile.TemporaryDirectory() as scratch:
        projector = Projector(reader, Path(scratch) / "views.db", [usage])
        projector.catch_up()
        projector.close()
    runs: dict[str, tuple[str, int, int]] = {}  # run: session, accepted at, first turn's tokens
    for stored in reader.read(limit=1_000_000):
        event = stored.decode()
        if isinstance(event, RunAccepted):
            runs[event.run_id] = (event.session_id, stored.recorded_at_ms, 0)
        elif isinstance(event, RunTurnCompleted) and event.turn == 1:
            session, at, _ = runs[event.run_id]
            runs[event.run_id] = (session, at, event.prompt_tokens + event.completion_tokens)
    reader.close()
    guard = BudgetGuard(budgets(), PRICES, usage.totals, lambda _p: ())
    checked = 0
    for session, at, tokens in runs.values():
        if on:
            assert guard.refusal(PRINCIPAL, session, at) is None
            assert guard.crossed(PRINCIPAL, session, at, run_tokens=tokens) is None
        checked += 1
    return {"runs": checked}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", choices=("make", "fold", "checks"))
    parser.add_argument("dir", type=Path)
    parser.add_argument("variant", nargs="?", choices=("on", "off"), default="on")
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--sessions-too", action="store_true")
    args = parser.parse_args()
    if args.step == "make":
        out = phase("on", args.runs, 8, args.dir)
    elif args.step == "fold":
        out = fold(args.dir, args.variant == "on", args.batch, args.sessions_too)
    else:
        out = checks(args.dir, args.variant == "on")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
