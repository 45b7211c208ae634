"""The usage totals the budget checks read (docs/usage.md, "What the limits are worth"): the
current month's sums in memory, fed by the usage view's own fold. Against a real journal and a
real views.db: they equal the view's rows for every principal and session, day, month and hour,
while folding, across UTC day, hour and month boundaries, and after a restart (loaded from the
view's own tables, the view kept, without reading the journal again); a check at a turn
boundary that has to settle sees the turn committed just before it, every time; a batch that
rolled back is never counted.

Commit times are chosen by giving the journal a clock of the test's (it reads ``time.time_ns``
when it commits); the projection's ``now_ms`` is injected the same way."""

from __future__ import annotations

import calendar
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import apsw
import pytest

import events.sqlite.journal as journal_module
from actors.budgets.config import Budget
from actors.budgets.guard import BudgetGuard
from events import Journal, StoredEvent
from events.catalog import RunAccepted, RunCompleted, RunStarted, RunTurnCompleted
from events.ids import new_id
from projections import Projector
from projections.usage import Column, TokenCounts, UsageProjection, UsageTotals, UsageView

MODEL = "m-configured"
FEB_LAST = calendar.timegm((2026, 2, 28, 23, 59, 59)) * 1000
"""2026-02-28T23:59:59Z: the last second of a day, an hour and a month."""
MAR_FIRST = FEB_LAST + 1000
"""2026-03-01T00:00:00Z."""


class Clock:
    """The journal's commit time (``time.time_ns``), set by the test; the rest of ``time`` as
    it is."""

    def __init__(self, ms: int) -> None:
        self.ms = ms

    def module(self) -> SimpleNamespace:
        names = {n: getattr(time, n) for n in dir(time) if not n.startswith("_")}
        return SimpleNamespace(**{**names, "time_ns": lambda: self.ms * 1_000_000})


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    at = Clock(FEB_LAST - 3_600_000)
    monkeypatch.setattr(journal_module, "time", at.module())
    return at


@pytest.fixture
def journal(data_dir: Path, clock: Clock) -> Iterator[Journal]:
    with Journal(data_dir / "journal.db") as j:
        yield j


def turn_completed(
    run_id: str, turn: int, tokens_in: int, tokens_out: int, *, cached: int = 0, model: str = ""
) -> RunTurnCompleted:
    """A provider answer's ``run.turn_completed`` (no tool call; ``model`` "": none named)."""
    return RunTurnCompleted(
        run_id=run_id,
        turn=turn,
        prompt_tokens=tokens_in,
        completion_tokens=tokens_out,
        cached_tokens=cached,
        tool_calls=0,
        finish_reason="stop",
        model=model,
    )


def started(run_id: str, model: str | None) -> RunStarted:
    return RunStarted(run_id=run_id, max_turns=8, max_tool_calls=8, wall_clock_s=60.0, model=model)


def run(
    journal: Journal,
    clock: Clock,
    session: str,
    principal: str,
    turns: list[tuple[int, int, int, str]],
    *,
    configured: str | None = MODEL,
    end: bool = True,
) -> str:
    """A run as a node records it: accepted on the session's stream, then started, one
    ``run.turn_completed`` per (ms after the start, input, output, model) on the run's stream
    (each committed at its own time), then completed."""
    run_id = new_id()
    journal.append(
        f"session/{session}",
        [RunAccepted(run_id=run_id, session_id=session, text="hi")],
        expected_seq=None,
        principal=principal,
    )
    stream = f"run/{run_id}"
    meta = {"principal": principal, "correlation_id": run_id, "causation_id": session}
    journal.append(stream, [started(run_id, configured)], expected_seq=None, **meta)
    start = clock.ms
    for number, (after_ms, tokens_in, tokens_out, model) in enumerate(turns, 1):
        clock.ms = start + after_ms
        turn = turn_completed(
            run_id, number, tokens_in, tokens_out, cached=tokens_in // 4, model=model
        )
        journal.append(stream, [turn], expected_seq=None, **meta)
    if end:
        done = RunCompleted(run_id=run_id, answer="ok", turns=len(turns))
        journal.append(stream, [done], expected_seq=None, **meta)
    return run_id


def view_tokens(views: Path, column: Column, value: str, period: str) -> dict[str, TokenCounts]:
    """The usage view's tokens per model of one principal or session in a day or month."""
    conn = apsw.Connection(str(views), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        rows: list[tuple[Any, ...]] = conn.execute(
            "SELECT model, SUM(input_tokens), SUM(output_tokens), SUM(cached_tokens),"
            f" SUM(turns) FROM usage WHERE {column} = ? AND day LIKE ? || '%' GROUP BY model",
            (value, period),
        ).fetchall()
    finally:
        conn.close()
    return {
        str(m): TokenCounts(input_tokens=i, output_tokens=o, cached_tokens=c, turns=t)
        for m, i, o, c, t in rows
    }


def view_runs(views: Path, column: Column, value: str, period: str) -> int:
    conn = apsw.Connection(str(views), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        count = conn.execute(
            f"SELECT COALESCE(SUM(runs), 0) FROM usage_runs WHERE {column} = ?"
            " AND hour LIKE ? || '%'",
            (value, period),
        ).get
    finally:
        conn.close()
    return int(count)


def subjects(views: Path) -> list[tuple[Column, str]]:
    conn = apsw.Connection(str(views), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        rows = conn.execute(
            "SELECT principal, session_id FROM usage UNION"
            " SELECT principal, session_id FROM usage_runs"
        ).fetchall()
    finally:
        conn.close()
    out: set[tuple[Column, str]] = set()
    for principal, session in rows:
        out |= {("principal", str(principal)), ("session_id", str(session))}
    return sorted(out)


def assert_agree(views: Path, totals: UsageTotals, periods: list[str]) -> int:
    """The totals equal the view for every subject the view counts, in each of ``periods``
    (days or months for tokens, hours or days for runs); returns how many values were compared
    that are not zero (a comparison of empty sides proves nothing)."""
    compared = 0
    for column, value in subjects(views):
        for period in periods:
            expected = view_tokens(views, column, value, period)
            assert totals.tokens(column, value, period) == expected, (column, value, period)
            compared += len(expected)
            if len(period) != 7:  # runs are counted by hour and by day
                runs = view_runs(views, column, value, period)
                assert totals.runs(column, value, period) == runs, (column, value, period)
                compared += runs > 0
    return compared


def usage_fold(projector: Projector) -> UsageProjection:
    (fold,) = [p for p in projector.projections if isinstance(p, UsageProjection)]
    return fold


def test_totals_agree_with_the_view_across_boundaries_and_after_a_restart(
    journal: Journal, clock: Clock, views: Path
) -> None:
    # The last hour of February: alice in two sessions, bob in one; one provider that names
    # no model (the run's configured one counts) and one that names another.
    run(journal, clock, "s-a1", "user:alice", [(0, 100, 10, ""), (1000, 200, 20, "m-other")])
    clock.ms = FEB_LAST - 60_000
    run(journal, clock, "s-a2", "user:alice", [(0, 50, 5, "")], configured=None)
    run(journal, clock, "s-b", "user:bob", [(0, 7, 3, MODEL)])
    # A run accepted in February whose turns land in March: its first second and a later hour.
    clock.ms = FEB_LAST
    run(journal, clock, "s-a1", "user:alice", [(1500, 11, 1, ""), (3_601_500, 13, 2, "")])
    # Still going when the node stops: its configured model must be known after the restart.
    clock.ms = MAR_FIRST + 7_200_000
    open_run = run(journal, clock, "s-b", "user:bob", [(0, 1, 1, "")], end=False)

    now = [MAR_FIRST + 7_300_000]
    projector = Projector(journal, views, [UsageProjection(lambda: now[0])])
    try:
        projector.catch_up()
        folded = usage_fold(projector).totals
        periods = [
            "2026-02",
            "2026-02-28",
            "2026-02-28T23",
            "2026-03",
            "2026-03-01",
            "2026-03-01T00",
            "2026-03-01T01",
            "2026-03-01T02",
        ]
        assert assert_agree(views, folded, periods) >= 20
        assert folded.tokens("principal", "user:alice", "2026-03") == {
            MODEL: TokenCounts(input_tokens=24, output_tokens=3, cached_tokens=5, turns=2)
        }
        assert folded.runs("principal", "user:alice", "2026-02-28T23") == 2  # and one at T22
        assert folded.runs("principal", "user:alice", "2026-02-28") == 3
        assert folded.runs("principal", "user:alice", "2026-03-01T00") == 0
        assert folded.principals("2026-03-01") == ["user:alice", "user:bob"]
    finally:
        projector.close()

    # A restart, views.db kept: the totals are rebuilt by the fold over the journal's records
    # of this month (from a day before it), and the view is not written twice.
    projector = Projector(journal, views, [UsageProjection(lambda: now[0])])
    try:
        rebuilt = usage_fold(projector).totals
        current = ["2026-02-28", "2026-02-28T23", "2026-03", "2026-03-01"]
        current += ["2026-03-01T00", "2026-03-01T01", "2026-03-01T02"]
        assert assert_agree(views, rebuilt, current) >= 15
        # The run in flight across the restart: its next turn names no model either.
        clock.ms = MAR_FIRST + 7_400_000
        stream = f"run/{open_run}"
        turn = turn_completed(open_run, 2, 5, 5)
        journal.append(
            stream,
            [turn],
            expected_seq=None,
            principal="user:bob",
            correlation_id=open_run,
            causation_id="s-b",
        )
        projector.catch_up()
        assert assert_agree(views, rebuilt, current) >= 15
        assert rebuilt.tokens("session_id", "s-b", "2026-03-01")[MODEL].turns == 2
    finally:
        projector.close()


def test_a_restart_in_a_later_month_counts_nothing_of_the_earlier_one(
    journal: Journal, clock: Clock, views: Path
) -> None:
    run(journal, clock, "s-a1", "user:alice", [(0, 100, 10, "")])
    projector = Projector(journal, views, [UsageProjection()])
    projector.catch_up()
    projector.close()
    april = calendar.timegm((2026, 4, 1, 0, 0, 1)) * 1000
    projector = Projector(journal, views, [UsageProjection(lambda: april)])
    try:
        totals = usage_fold(projector).totals
        assert totals.tokens("principal", "user:alice", "2026-02-28") == {}
        assert totals.principals("2026-02") == []
        assert assert_agree(views, totals, ["2026-04", "2026-04-01", "2026-04-01T00"]) == 0
    finally:
        projector.close()


def test_budgets_turn_over_at_utc_boundaries(journal: Journal, clock: Clock, views: Path) -> None:
    budgets = {
        "day": Budget(
            scope="principal", subject="user:a", measure="tokens", period="day", hard=100
        ),
        "month": Budget(scope="session", subject="s1", measure="tokens", period="month", hard=150),
        "hour": Budget(scope="principal", subject="user:a", measure="runs", period="hour", hard=2),
    }
    clock.ms = FEB_LAST - 1000
    run(journal, clock, "s1", "user:a", [(0, 90, 10, "")])
    run(journal, clock, "s1", "user:a", [(0, 1, 1, "")])
    projector = Projector(journal, views, [UsageProjection()])
    try:
        projector.catch_up()
        guard = BudgetGuard(budgets, {}, usage_fold(projector).totals, lambda _p: ())
        before = guard.refusal("user:a", "s1", FEB_LAST + 999)
        assert before is not None and before.budget == "day" and before.used == 102
        assert before.period_key == "2026-02-28"
        runs = guard.refusal("user:a", "s2", FEB_LAST + 999)  # the day budget counts s2 too
        assert runs is not None and runs.budget == "day"
        assert guard.refusal("user:a", "s1", MAR_FIRST) is None  # a new day, hour and month
        # March's first minutes: the session's month budget counts from zero again.
        clock.ms = MAR_FIRST + 60_000
        run(journal, clock, "s1", "user:b", [(0, 140, 10, "")])
        projector.catch_up()
        month = guard.refusal("user:b", "s1", MAR_FIRST + 120_000)
        assert month is not None and month.budget == "month" and month.used == 150
        assert guard.refusal("user:b", "s9", MAR_FIRST + 120_000) is None
        # February still answers a check whose clock read it (kept as the month before).
        late = guard.refusal("user:a", "s1", FEB_LAST + 999)
        assert late is not None and late.budget == "day"
        assert assert_agree(views, guard.totals, ["2026-02-28", "2026-02", "2026-03"]) >= 3
        # Two months on, February is forgotten.
        clock.ms = calendar.timegm((2026, 4, 2, 0, 0, 0)) * 1000
        run(journal, clock, "s1", "user:c", [(0, 1, 1, "")])
        projector.catch_up()
        assert guard.refusal("user:a", "s1", FEB_LAST + 999) is None
        assert guard.totals.tokens("session_id", "s1", "2026-03") != {}
    finally:
        projector.close()


def test_a_check_that_settles_sees_the_turn_committed_before_it(
    journal: Journal, clock: Clock, views: Path
) -> None:
    projector = Projector(journal, views, [UsageProjection()])
    projector.follow(journal)

    def settle() -> None:
        projector.wait_for(journal.committed_position, 10)

    try:
        projector.wait_caught_up()
        limit = 0
        for i in range(40):
            clock.ms += 1
            tokens = 10 + i
            limit += tokens
            budgets = {
                "cap": Budget(
                    scope="principal", subject="user:a", measure="tokens", period="day", hard=limit
                )
            }
            guard = BudgetGuard(
                budgets,
                {},
                usage_fold(projector).totals,
                lambda _p: (),
                settle,
            )
            # The turn is committed; the projector's thread may not have folded it yet. The run's
            # own tokens reach the limit, so the check settles and must count the turn once.
            run(journal, clock, "s1", "user:a", [(0, tokens, 0, "")])
            found = guard.crossed("user:a", "s1", clock.ms, run_tokens=tokens)
            assert found is not None and found.used == limit, (i, found)
    finally:
        projector.close()


def test_a_batch_rolled_back_is_not_counted(views: Path) -> None:
    fold = UsageProjection()
    conn = apsw.Connection(":memory:")
    conn.execute(fold.ddl)
    turn = turn_completed("r1", 1, 5, 5, model=MODEL)
    stored = StoredEvent(
        position=1,
        event_id=new_id(),
        stream="run/r1",
        stream_seq=0,
        kind="run.turn_completed",
        version=1,
        recorded_at_ms=FEB_LAST,
        principal="user:a",
        correlation_id="r1",
        causation_id="s1",
        payload=b"",
        prev_hash=b"",
        hash=b"",
    )
    fold.apply(conn, stored, turn)
    fold.flush(conn)
    fold.reset()  # the transaction failed after the flush
    fold.committed()
    assert fold.totals.tokens("principal", "user:a", "2026-02-28") == {}
    fold.apply(conn, stored, turn)  # folded again, committed this time
    fold.flush(conn)
    fold.committed()
    assert fold.totals.tokens("principal", "user:a", "2026-02")[MODEL].turns == 1


class NoJournal:
    """A reader that fails the test if it is read: a restart loads the totals from the view."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the journal was read at resume ({name})")


def test_a_restart_loads_the_totals_from_the_view_without_reading_the_journal() -> None:
    """What the fold wrote (rows of this month, and of the day before it began) is what the
    totals hold after a start; older rows are not counted; the journal is never read, so a
    start costs the same whatever the month's length."""
    conn = apsw.Connection(":memory:")
    projection = UsageProjection(now_ms=lambda: MAR_FIRST + 3_600_000)
    conn.execute(projection.ddl)
    conn.executemany(
        "INSERT INTO usage VALUES (?,?,?,?,?,?,?,?)",
        [
            ("2026-03-01", "user:a", "s1", MODEL, 10, 5, 1, 2),
            ("2026-02-28", "user:a", "s1", MODEL, 7, 3, 0, 1),
            ("2026-02-27", "user:a", "s1", MODEL, 1000, 1000, 0, 9),
        ],
    )
    conn.executemany(
        "INSERT INTO usage_runs VALUES (?,?,?,?)",
        [("user:a", "2026-03-01T00", "s1", 2), ("user:a", "2026-02-27T12", "s1", 9)],
    )
    projection.resume(NoJournal(), 42, conn)
    totals = projection.totals
    march = totals.tokens("principal", "user:a", "2026-03")[MODEL]
    assert (march.input_tokens, march.output_tokens, march.cached_tokens, march.turns) == (
        10, 5, 1, 2,
    )  # fmt: skip
    assert totals.tokens("session_id", "s1", "2026-02-28")[MODEL].input_tokens == 7
    assert totals.tokens("principal", "user:a", "2026-02-27") == {}
    assert totals.runs("principal", "user:a", "2026-03-01T00") == 2
    assert totals.runs("session_id", "s1", "2026-03-01") == 2
    assert totals.runs("principal", "user:a", "2026-02-27") == 0


def model_writes(projector: Projector) -> list[str]:
    """Every statement the projector's connection runs that writes ``usage_run_models``, from
    now on (the list fills as it runs)."""
    seen: list[str] = []

    def trace(_cursor: apsw.Cursor, sql: str, _bindings: Any) -> bool:
        if "usage_run_models" in sql and not sql.lstrip().upper().startswith("SELECT"):
            seen.append(sql)
        return True

    projector.conn.exec_trace = trace
    return seen


def run_models_of(conn: apsw.Connection) -> dict[str, str]:
    return {str(r): str(m) for r, m in conn.execute("SELECT * FROM usage_run_models")}


def run_models(views: Path) -> dict[str, str]:
    conn = apsw.Connection(str(views), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return run_models_of(conn)
    finally:
        conn.close()


def test_only_a_change_of_a_runs_configured_model_is_written(
    journal: Journal, clock: Clock, views: Path
) -> None:
    """``usage_run_models`` holds the configured model of each run in flight that recorded one
    (what a turn naming no model is counted by after a restart); a run that records none, or
    starts and ends within one batch, writes nothing there."""
    projector = Projector(journal, views, [UsageProjection()])
    try:
        writes = model_writes(projector)
        run(journal, clock, "s1", "user:a", [(0, 5, 5, "")], configured=None)
        run(journal, clock, "s1", "user:a", [(0, 5, 5, "")])  # one batch: start to end
        projector.catch_up()
        assert writes == []
        open_run = run(journal, clock, "s1", "user:a", [(0, 5, 5, "")], end=False)
        projector.catch_up()
        assert len(writes) == 1 and run_models(views) == {open_run: MODEL}
        done = RunCompleted(run_id=open_run, answer="ok", turns=1)
        meta = {"principal": "user:a", "correlation_id": open_run, "causation_id": "s1"}
        journal.append(f"run/{open_run}", [done], expected_seq=None, **meta)
        projector.catch_up()
        assert len(writes) == 2 and run_models(views) == {}
        session = usage_fold(projector).totals.tokens("session_id", "s1", "2026-02-28")
        assert session == {
            "unknown": TokenCounts(input_tokens=5, output_tokens=5, cached_tokens=1, turns=1),
            MODEL: TokenCounts(input_tokens=10, output_tokens=10, cached_tokens=2, turns=2),
        }
    finally:
        projector.close()


def stored_event(position: int, run_id: str, kind: str) -> StoredEvent:
    """The envelope of one of ``run_id``'s events, committed on the last day of February."""
    return StoredEvent(
        position=position,
        event_id=new_id(),
        stream=f"run/{run_id}",
        stream_seq=0,
        kind=kind,
        version=1,
        recorded_at_ms=FEB_LAST,
        principal="user:a",
        correlation_id=run_id,
        causation_id="s1",
        payload=b"",
        prev_hash=b"",
        hash=b"",
    )


def test_a_batch_rolled_back_puts_the_runs_models_back() -> None:
    """A batch that ends one run and starts another, rolled back after its flush and folded
    again: the table ends as if it had committed the first time (the ended run's row gone, the
    started one's written), and a turn naming no model counts the started run's, in this fold
    and in one started from the table."""
    fold = UsageProjection()
    conn = apsw.Connection(":memory:")
    conn.execute(fold.ddl)
    with conn:
        fold.apply(conn, stored_event(1, "r1", "run.started"), started("r1", MODEL))
        fold.flush(conn)
    fold.committed()
    batch: list[tuple[StoredEvent, RunStarted | RunCompleted]] = [
        (stored_event(2, "r1", "run.completed"), RunCompleted(run_id="r1", answer="ok", turns=1)),
        (stored_event(3, "r2", "run.started"), started("r2", "m-2")),
    ]

    def fold_batch() -> None:
        for stored, event in batch:
            fold.apply(conn, stored, event)
        fold.flush(conn)

    with pytest.raises(RuntimeError), conn:
        fold_batch()
        raise RuntimeError("the commit failed")
    fold.reset()
    assert run_models_of(conn) == {"r1": MODEL}
    with conn:
        fold_batch()
    fold.committed()
    assert run_models_of(conn) == {"r2": "m-2"}
    restarted = UsageProjection()
    restarted.resume(NoJournal(), 3, conn)
    turn = turn_completed("r2", 1, 3, 1)
    for projection in (fold, restarted):
        with conn:
            projection.apply(conn, stored_event(4, "r2", "run.turn_completed"), turn)
            projection.flush(conn)
        projection.committed()
        assert projection.totals.tokens("principal", "user:a", "2026-02-28")["m-2"].turns == 1


def all_time_of(views: Path) -> dict[str, TokenCounts]:
    """Every model's tokens in the usage view, summed by SQL (what the totals must equal)."""
    conn = apsw.Connection(str(views), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        rows: list[tuple[Any, ...]] = conn.execute(
            "SELECT model, SUM(input_tokens), SUM(output_tokens), SUM(cached_tokens),"
            " SUM(turns) FROM usage GROUP BY model"
        ).fetchall()
    finally:
        conn.close()
    return {
        str(m): TokenCounts(input_tokens=i, output_tokens=o, cached_tokens=c, turns=t)
        for m, i, o, c, t in rows
    }


class FirstRead:
    """A projection that folds nothing and reads ``/metrics``'s totals for the first time at
    one moment of the projector's batch: ``flush`` (inside the batch's transaction, so the
    read does not see it) or ``committed`` (after the commit, before the usage fold publishes
    the batch): the two ends of the window the totals must count each batch once across."""

    version = 1
    tables: tuple[str, ...] = ()
    ddl = ""
    kinds: frozenset[str] | None = frozenset({"run.turn_completed"})

    def __init__(self, at: str) -> None:
        self.name = f"first-read-{at}"
        self.view: UsageView | None = None
        self.read: dict[str, TokenCounts] | None = None
        setattr(self, at, self._read)

    def apply(self, conn: apsw.Connection, stored: StoredEvent, event: Any) -> None:
        pass

    def _read(self, *_conn: apsw.Connection) -> None:
        if self.view is not None and self.read is None:
            self.read = self.view.totals()


@pytest.mark.parametrize("at", ["flush", "committed"])
def test_all_time_totals_count_a_batch_once_whenever_they_are_first_read(
    journal: Journal, clock: Clock, views: Path, at: str
) -> None:
    """``/metrics``'s totals since the journal began are summed from the view when first asked
    and kept up by the fold after. A first read while a batch is folded but not committed must
    still count it (the fold adds it after), and one after the commit but before the fold
    published the batch must not count it twice; both equal the view's own sums at the end,
    and a restart reads them again from the view."""
    models = ["", "m-other", MODEL]
    for n in range(3):
        run(journal, clock, f"s{n}", "user:a", [(0, 10 + n, 1, models[n])])
    probe = FirstRead(at)
    usage = UsageProjection()
    projector = Projector(journal, views, [probe, usage])  # the probe's hooks run first
    view = UsageView(views, usage.totals)
    try:
        projector.catch_up()  # folded before anyone asked: nothing kept for them
        probe.view = view
        for n in range(3):
            run(journal, clock, f"s{n}", "user:b", [(0, 100 + n, 2, models[n])])
        projector.catch_up()
        assert probe.read is not None  # read inside the second batch's window
        expected = all_time_of(views)
        assert sum(t.turns for t in expected.values()) == 6
        assert view.totals() == expected
        run(journal, clock, "s9", "user:c", [(0, 1000, 3, "")])
        projector.catch_up()
        assert view.totals() == all_time_of(views)
    finally:
        view.close()
        projector.close()
    projector = Projector(journal, views, [UsageProjection()])
    view = UsageView(views, usage_fold(projector).totals)
    try:
        assert view.totals() == all_time_of(views)
        assert sum(t.turns for t in view.totals().values()) == 7
    finally:
        view.close()
        projector.close()


def test_an_old_views_db_loses_its_usage_totals_table(
    journal: Journal, clock: Clock, views: Path
) -> None:
    """The table that was written every turn is gone after a start; the view is not rebuilt."""
    run(journal, clock, "s1", "user:a", [(0, 5, 5, "")])
    projector = Projector(journal, views, [UsageProjection()])
    projector.catch_up()
    projector.close()
    conn = apsw.Connection(str(views))
    conn.execute("CREATE TABLE usage_totals(model TEXT PRIMARY KEY)")
    conn.close()
    projector = Projector(journal, views, [UsageProjection()])
    try:
        assert projector.checkpoints()["usage"] > 0  # kept, not folded again
        tables = {str(r[0]) for r in projector.conn.execute("SELECT name FROM sqlite_master")}
        assert "usage_totals" not in tables and "usage" in tables
    finally:
        projector.close()


def test_the_month_is_counted_only_for_whom_the_configuration_reads_it(
    journal: Journal, clock: Clock, views: Path
) -> None:
    """``count_for`` (set at start from the budgets and whether a policy reads
    ``context.usage_today``): the columns kept agree with the view, the others hold nothing,
    and with none the fold keeps no month at all."""
    run(journal, clock, "s1", "user:a", [(0, 5, 5, "")])
    projector = Projector(journal, views, [UsageProjection()])
    try:
        projector.catch_up()  # resumed and folded counting both
        totals = usage_fold(projector).totals
        assert totals.tokens("session_id", "s1", "2026-02-28") != {}
        totals.count_for({"principal"})
        assert totals.tokens("session_id", "s1", "2026-02-28") == {}  # forgotten
        run(journal, clock, "s2", "user:a", [(0, 7, 7, "")])
        projector.catch_up()
        assert totals.tokens("session_id", "s2", "2026-02-28") == {}
        assert totals.runs("session_id", "s2", "2026-02-28") == 0
        day = "2026-02-28"
        assert totals.tokens("principal", "user:a", day) == view_tokens(
            views, "principal", "user:a", day
        )
        assert totals.runs("principal", "user:a", day) == 2
        totals.count_for(())
        run(journal, clock, "s3", "user:b", [(0, 9, 9, "")])
        projector.catch_up()
        assert totals.principals(day) == []
    finally:
        projector.close()
