"""The usage view: tokens and runs by UTC day, principal, session and model (docs/usage.md).

Folded from ``run.accepted`` (a run counted in its UTC hour, for ``runs`` budgets),
``run.started`` (the configured model of the run's provider, when it records one),
``run.turn_completed`` (one provider answer's tokens) and the runs' terminal events (which
forget the run's configured model). A turn's principal and session are its record's: the run's
principal, and the session its stream names as the cause. Its model is the one the provider
said answered, else the configured one its run recorded at start, else ``unknown``.

Cost is not folded: :func:`cost_of` prices the folded tokens with today's ``[usage.prices]`` when
asked, so a price change needs no rebuild and the view stays a pure function of the journal.

The fold keeps a batch's sums in memory and writes them in one statement per table when the
projector's batch ends (``flush``); once that transaction commits, the same sums are added to
:class:`UsageTotals`, the current month's totals in memory that the budget checks
(:mod:`actors.budgets`) and ``context.usage_today`` read without a query, and the totals since
the journal began that ``/metrics`` reads (summed from the view once, when first asked, then kept
up by the fold: no table is written for them). :class:`UsageView` answers ``GET /v1/usage`` and
``/metrics``; :func:`load_usage` runs the same fold in memory for ``reel usage`` on a stopped
node.
"""

from __future__ import annotations

import calendar
import functools
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

import apsw
import msgspec

from events import Event, JournalReadPort, StoredEvent
from events.catalog import (
    RunAccepted,
    RunCancelled,
    RunCompleted,
    RunFailed,
    RunStarted,
    RunTurnCompleted,
    kinds_of,
)
from projections.base import folded
from projections.pool import PooledReader, ReaderLimits

UNKNOWN_MODEL = "unknown"
"""The model of a turn whose provider named none and whose run recorded no configured model."""

USAGE_KINDS = kinds_of(
    RunAccepted, RunStarted, RunTurnCompleted, RunCompleted, RunFailed, RunCancelled
)
"""The kinds the usage view folds."""

GROUPINGS: dict[str, str] = {"principal": "principal", "session": "session_id", "model": "model"}
"""``GET /v1/usage?by=``: each grouping and the column it groups by."""

Grouping = Literal["principal", "session", "model"]

Column = Literal["principal", "session_id"]
"""Whom usage is counted for in :class:`UsageTotals` (and a budget measures): a principal or a
session."""

Cell = tuple[str, str, str, str]
"""A row of the ``usage`` table: (day, principal, session, model)."""
RunCell = tuple[str, str, str]
"""A row of the ``usage_runs`` table: (principal, hour, session)."""
Sums = list[int]
"""Input, output and cached tokens and turns, added to in place (the fold's running sums)."""
Counted = tuple[int, int, int, int]
"""Input, output and cached tokens and turns, as :meth:`UsageTotals.sums` reads them."""

DAY_MS = 86_400_000


class Price(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``[usage.prices."MODEL"]``: what a million tokens of the model cost, in the operator's
    unit (there are no built-in prices: they would go stale)."""

    input_per_mtok: float
    output_per_mtok: float
    cached_input_per_mtok: float | None = None
    """Input tokens served from the provider's prompt cache; unset: priced as input."""

    def __post_init__(self) -> None:
        for field in ("input_per_mtok", "output_per_mtok", "cached_input_per_mtok"):
            value = getattr(self, field)
            if value is not None and not value >= 0:  # catches NaN too
                raise ValueError(f"{field}: must be a number >= 0, not {value}")

    def cost(self, input_tokens: int, output_tokens: int, cached_tokens: int) -> float:
        """What the tokens cost: ``cached_tokens`` (part of ``input_tokens``) at the cached
        price, the rest of the input at the input price, the output at the output price."""
        cached = (
            self.input_per_mtok
            if self.cached_input_per_mtok is None
            else self.cached_input_per_mtok
        )
        uncached = max(input_tokens - cached_tokens, 0)
        cost = (
            uncached * self.input_per_mtok
            + cached_tokens * cached
            + output_tokens * self.output_per_mtok
        )
        return cost / 1_000_000


class TokenCounts(msgspec.Struct, frozen=True, kw_only=True):
    """Token counts of one model (or a sum over models)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    """The part of ``input_tokens`` served from a prompt cache."""
    turns: int = 0

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def __add__(self, other: TokenCounts) -> TokenCounts:
        return TokenCounts(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cached_tokens=self.cached_tokens + other.cached_tokens,
            turns=self.turns + other.turns,
        )


def cost_of(model: str, tokens: TokenCounts, prices: Mapping[str, Price]) -> float | None:
    """What ``tokens`` of ``model`` cost by ``prices`` (None: the model has no price)."""
    price = prices.get(model)
    if price is None:
        return None
    return price.cost(tokens.input_tokens, tokens.output_tokens, tokens.cached_tokens)


def total_cost(by_model: Mapping[str, TokenCounts], prices: Mapping[str, Price]) -> float:
    """The cost of every priced model's tokens (unpriced models count 0)."""
    return sum(cost_of(m, t, prices) or 0.0 for m, t in by_model.items())


DAY, HOUR, MONTH = "%Y-%m-%d", "%Y-%m-%dT%H", "%Y-%m"
"""The UTC periods usage is counted in, as :func:`utc` formats them."""


def utc(fmt: str, ms: int) -> str:
    """The UTC period (:data:`DAY`, :data:`HOUR` or :data:`MONTH`) of a time in ms."""
    return _utc(fmt, ms // 1000)


@functools.lru_cache(maxsize=64)
def _utc(fmt: str, second: int) -> str:
    # Every fold and check asks for the same few seconds' periods: formatting is most of a check.
    return time.strftime(fmt, time.gmtime(second))


def day_of(ms: int) -> str:
    """The UTC day of a commit time: ``2026-11-27``."""
    return utc(DAY, ms)


def hour_of(ms: int) -> str:
    """The UTC hour of a commit time: ``2026-11-27T16``."""
    return utc(HOUR, ms)


def parse_day(raw: str) -> str | None:
    """``raw`` as a UTC day ``YYYY-MM-DD`` when it is a real one, else None."""
    try:
        parsed = time.strptime(raw, "%Y-%m-%d")
    except ValueError:
        return None
    day = time.strftime("%Y-%m-%d", parsed)
    return day if day == raw else None


def query_days(from_raw: str | None, to_raw: str | None, now_ms: int) -> tuple[str, str]:
    """The days ``from``..``to`` a usage query asks for (each defaults to today, UTC).
    Raises ``ValueError(field, problem)`` when one is not a day or ``from`` is after ``to``."""
    today = day_of(now_ms)
    days: list[str] = []
    for field, raw in (("from", from_raw), ("to", to_raw)):
        day = today if raw is None else parse_day(raw)
        if day is None:
            raise ValueError(field, f"{str(raw)[:32]!r} is not a day (YYYY-MM-DD, UTC)")
        days.append(day)
    if days[0] > days[1]:
        raise ValueError("from", f"{days[0]} is after to ({days[1]})")
    return days[0], days[1]


class UsageTotals:
    """The usage of the current UTC month (and the one before) in memory, by principal and by
    session: tokens per model for each day and for the month, runs for each hour and each day.
    What the budget checks and ``context.usage_today`` read, as dict lookups.

    Only :class:`UsageProjection` adds to it, with the sums of each batch it folded once the
    batch's transaction has committed and before the projector moves its position: a caller
    that waited for the views to include a position (``Projector.wait_for``) reads every turn up
    to it, and a batch that rolled back is never counted. Months before the previous one are
    dropped when a record of a new month is added. Safe to read from any thread.

    Every model's tokens since the journal began (:meth:`all_time`) are summed from the view the
    first time they are asked for, and kept up by :meth:`add` from then on: a node nobody
    scrapes pays nothing for them, and none pays a write a turn."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._month = ""
        self._tokens: dict[tuple[Column, str, str], dict[str, Sums]] = {}
        self._runs: dict[tuple[Column, str, str], int] = {}
        self._counting: frozenset[Column] = frozenset(("principal", "session_id"))
        """Whom the month is counted for (:meth:`count_for`)."""
        self._all_lock = threading.Lock()
        self._all: dict[str, Sums] | None = None
        """Each model's tokens since the journal began, once :meth:`all_time` summed them."""
        self._all_at = 0
        """The view's position those sums were read at: a batch up to it is in them."""

    def add(
        self, cells: Mapping[Cell, Sums], runs: Mapping[RunCell, int], position: int = 0
    ) -> None:
        """Count a folded batch: its ``usage`` cells and ``usage_runs`` rows, committed to the
        view up to ``position`` (its last record's)."""
        if self._all is not None and cells:
            with self._all_lock:
                if position > self._all_at:  # else the view's sums already held the batch
                    for (_day, _principal, _session, model), sums in cells.items():
                        _add_into(self._all, model, sums)
        counting = self._counting
        if not counting:
            return
        by_principal, by_session = "principal" in counting, "session_id" in counting
        key: tuple[Column, str, str]
        with self._lock:
            tokens = self._tokens
            for (day, principal, session, model), sums in cells.items():
                month = day[:7]
                if month > self._month:
                    self._roll(month)
                    tokens = self._tokens
                keys: list[tuple[Column, str, str]] = []
                if by_principal:
                    keys += (("principal", principal, day), ("principal", principal, month))
                if by_session:
                    keys += (("session_id", session, day), ("session_id", session, month))
                for key in keys:
                    models = tokens.get(key)
                    if models is None:
                        tokens[key] = models = {}
                    _add_into(models, model, sums)
            for (principal, hour, session), n in runs.items():
                if hour[:7] > self._month:
                    self._roll(hour[:7])
                counted, day = self._runs, hour[:10]
                keys = []
                if by_principal:
                    keys += (("principal", principal, hour), ("principal", principal, day))
                if by_session:
                    keys += (("session_id", session, hour), ("session_id", session, day))
                for key in keys:
                    counted[key] = counted.get(key, 0) + n

    def count_for(self, columns: Iterable[Column]) -> None:
        """Count the month only for ``columns`` from now on, and forget what was counted for
        the others: a node whose budgets count no session (and no budget at all, and no policy
        reading ``context.usage_today``: nothing) pays nothing a turn for it. Set once at start,
        from the configuration (``transports.runtime.budget_guard``); every reader of a column
        not counted is then one the configuration does not have."""
        with self._lock:
            self._counting = frozenset(columns)
            self._tokens = {k: v for k, v in self._tokens.items() if k[0] in self._counting}
            self._runs = {k: v for k, v in self._runs.items() if k[0] in self._counting}

    def _roll(self, month: str) -> None:
        """``month`` begins: keep it and the last month seen before it."""
        keep = (self._month, month)
        self._tokens = {k: v for k, v in self._tokens.items() if k[2][:7] in keep}
        self._runs = {k: v for k, v in self._runs.items() if k[2][:7] in keep}
        self._month = month

    def tokens(self, column: Column, value: str, period: str) -> dict[str, TokenCounts]:
        """The tokens per model of one principal or session in a UTC day (``2026-11-27``) or
        month (``2026-11``)."""
        return {model: _counts(sums) for model, sums in self.sums(column, value, period).items()}

    def sums(self, column: Column, value: str, period: str) -> dict[str, Counted]:
        """:meth:`tokens` as plain tuples, for the checks' hot path (no Struct built)."""
        with self._lock:
            models = self._tokens.get((column, value, period))
            if not models:
                return {}
            return {model: (s[0], s[1], s[2], s[3]) for model, s in models.items()}

    def runs(self, column: Column, value: str, period: str) -> int:
        """The runs accepted for one principal or session in a UTC hour (``2026-11-27T16``) or
        day (``2026-11-27``)."""
        with self._lock:
            return self._runs.get((column, value, period), 0)

    def all_time(self, read: Callable[[], tuple[int, dict[str, Sums]]]) -> dict[str, Counted]:
        """Every model's tokens since the journal began. The first call sums them with ``read``
        (the view's position and its sums by model, in one read transaction); :meth:`add` keeps
        them up from then on. The lock is held across that read, so a batch that commits
        meanwhile is either in the view's sums (its position is at most theirs: not added again)
        or added once the read is done; a batch added before the read began had committed
        before it, so the read holds it."""
        with self._all_lock:
            if self._all is None:
                self._all_at, self._all = read()
            return {model: (s[0], s[1], s[2], s[3]) for model, s in self._all.items()}

    def principals(self, period: str) -> list[str]:
        """Every principal with tokens (a day or month) or runs (an hour or day) in ``period``."""
        with self._lock:
            keys = [*self._tokens, *self._runs]
        return sorted({k[1] for k in keys if k[0] == "principal" and k[2] == period})


def _add_into(models: dict[str, Sums], model: str, sums: Sums) -> None:
    into = models.get(model)
    if into is None:
        models[model] = sums.copy()
    else:
        into[0] += sums[0]
        into[1] += sums[1]
        into[2] += sums[2]
        into[3] += sums[3]


def _counts(sums: Counted) -> TokenCounts:
    return TokenCounts(
        input_tokens=sums[0], output_tokens=sums[1], cached_tokens=sums[2], turns=sums[3]
    )


_SUMS = (
    " input_tokens = input_tokens + excluded.input_tokens,"
    " output_tokens = output_tokens + excluded.output_tokens,"
    " cached_tokens = cached_tokens + excluded.cached_tokens, turns = turns + excluded.turns"
)
_ADD_USAGE = f"INSERT INTO usage VALUES (?,?,?,?,?,?,?,?) ON CONFLICT DO UPDATE SET{_SUMS}"
_ADD_RUNS = (
    "INSERT INTO usage_runs VALUES (?,?,?,?) ON CONFLICT DO UPDATE SET runs = runs + excluded.runs"
)


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


class UsageProjection:
    """The usage fold. ``now_ms`` (injectable for tests) says which month :meth:`resume`
    rebuilds :attr:`totals` for."""

    name: str = "usage"
    version: int = 1
    tables: tuple[str, ...] = ("usage", "usage_runs", "usage_run_models")
    kinds: frozenset[str] | None = frozenset(USAGE_KINDS)
    ddl: str = """
    CREATE TABLE IF NOT EXISTS usage(
        day TEXT NOT NULL,
        principal TEXT NOT NULL,
        session_id TEXT NOT NULL,
        model TEXT NOT NULL,
        input_tokens INTEGER NOT NULL,
        output_tokens INTEGER NOT NULL,
        cached_tokens INTEGER NOT NULL,
        turns INTEGER NOT NULL,
        PRIMARY KEY(principal, day, session_id, model)
    ) WITHOUT ROWID;
    CREATE INDEX IF NOT EXISTS usage_by_session ON usage(session_id, day);
    CREATE INDEX IF NOT EXISTS usage_by_day ON usage(day);
    CREATE TABLE IF NOT EXISTS usage_runs(
        principal TEXT NOT NULL,
        hour TEXT NOT NULL,
        session_id TEXT NOT NULL,
        runs INTEGER NOT NULL,
        PRIMARY KEY(principal, hour, session_id)
    ) WITHOUT ROWID;
    CREATE INDEX IF NOT EXISTS usage_runs_by_session ON usage_runs(session_id, hour);
    DROP TABLE IF EXISTS usage_totals; -- once written a turn; the totals are in memory now
    CREATE TABLE IF NOT EXISTS usage_run_models(
        run_id TEXT PRIMARY KEY,
        model TEXT NOT NULL
    ) WITHOUT ROWID;
    """

    def __init__(self, now_ms: Callable[[], int] = _wall_ms) -> None:
        self.now_ms = now_ms
        self.totals = UsageTotals()
        """The current month's sums, for the budget checks (fed by this fold only)."""
        self._models: dict[str, str] = {}
        """The configured model of each run in flight that recorded one: what
        ``usage_run_models`` holds once the batch commits (loaded from it at :meth:`resume`), so
        a run not here has none and a turn never queries the table."""
        self._before: dict[str, str | None] = {}
        """Each run whose configured model this batch changed, with its model before the batch
        (kept until the batch committed): :meth:`flush` writes only the rows that changed,
        :meth:`reset` puts them back."""
        self._cells: dict[Cell, Sums] = {}
        self._runs: dict[RunCell, int] = {}
        self._written: tuple[dict[Cell, Sums], dict[RunCell, int]] = ({}, {})
        """The batch flushed, added to :attr:`totals` once it committed."""
        self._position = 0
        """The last record folded (a batch's position when it is added to :attr:`totals`)."""

    def apply(self, conn: apsw.Connection, stored: StoredEvent, event: Event) -> None:
        self._position = stored.position
        if isinstance(event, RunTurnCompleted):
            model = event.model or self._models.get(event.run_id) or UNKNOWN_MODEL
            cell = (
                day_of(stored.recorded_at_ms),
                stored.principal,
                stored.causation_id or "",
                model,
            )
            sums = self._cells.get(cell)
            if sums is None:
                self._cells[cell] = [
                    event.prompt_tokens,
                    event.completion_tokens,
                    event.cached_tokens,
                    1,
                ]
            else:
                sums[0] += event.prompt_tokens
                sums[1] += event.completion_tokens
                sums[2] += event.cached_tokens
                sums[3] += 1
        elif isinstance(event, RunAccepted):
            key = (stored.principal, hour_of(stored.recorded_at_ms), event.session_id)
            self._runs[key] = self._runs.get(key, 0) + 1
        elif isinstance(event, RunStarted):
            self._configure(event.run_id, event.model or None)
        elif isinstance(event, RunCompleted | RunFailed | RunCancelled):
            self._configure(event.run_id, None)

    def _configure(self, run_id: str, model: str | None) -> None:
        """``run_id``'s configured model is now ``model`` (None: it has none, or it ended)."""
        was = self._models.get(run_id)
        if model == was:
            return  # a run without a model starts or ends: nothing to keep, nothing to write
        self._before.setdefault(run_id, was)
        if model is None:
            del self._models[run_id]
        else:
            self._models[run_id] = model

    def flush(self, conn: apsw.Connection) -> None:
        """Write the batch's sums, one upsert per cell, and the configured models that changed,
        inside the projector's transaction."""
        cells, runs = self._cells, self._runs
        if not (cells or runs or self._before):
            return
        for cell, sums in cells.items():
            conn.execute(_ADD_USAGE, (*cell, *sums))
        for key, n in runs.items():
            conn.execute(_ADD_RUNS, (*key, n))
        for run_id, was in self._before.items():
            model = self._models.get(run_id)
            if model == was:
                continue  # started and ended in this batch: no row before, none after
            if model is None:
                conn.execute("DELETE FROM usage_run_models WHERE run_id = ?", (run_id,))
            else:
                conn.execute(
                    "INSERT OR REPLACE INTO usage_run_models VALUES (?,?)", (run_id, model)
                )
        self._written = (cells, runs)
        self._cells, self._runs = {}, {}

    def committed(self) -> None:
        """The batch's transaction committed: count it in :attr:`totals`."""
        cells, runs = self._written
        if cells or runs:
            self.totals.add(cells, runs, self._position)
            self._written = ({}, {})
        if self._before:
            self._before = {}

    def reset(self) -> None:
        """The batch rolled back: forget its sums, and put back the runs' models as the table
        still holds them (the batch is folded again from there)."""
        for run_id, was in self._before.items():
            if was is None:
                self._models.pop(run_id, None)
            else:
                self._models[run_id] = was
        self._cells, self._runs = {}, {}
        self._before = {}
        self._written = ({}, {})

    def resume(self, reader: JournalReadPort, position: int, conn: apsw.Connection) -> None:
        """Load :attr:`totals` from the tables this fold wrote up to ``position`` (a node's
        start with views.db kept): their rows from the day before this month began (a clock
        stepped back by less than a day between records) on, as the fold counted them. Read
        from the view, not the journal: folding a month of records again would cost a start
        time that grows with the month. The configured models of the runs still in flight
        are loaded from ``usage_run_models``: a turn of one never queries it."""
        self._models = {
            str(run_id): str(model)
            for run_id, model in conn.execute("SELECT run_id, model FROM usage_run_models")
        }
        if position <= 0:
            return
        t = time.gmtime(self.now_ms() // 1000)
        month_start_ms = calendar.timegm((t.tm_year, t.tm_mon, 1, 0, 0, 0)) * 1000
        since = day_of(month_start_ms - DAY_MS)
        cells: dict[Cell, Sums] = {
            (day, principal, session, model): [inp, out, cached, turns]
            for day, principal, session, model, inp, out, cached, turns in conn.execute(
                "SELECT day, principal, session_id, model, input_tokens, output_tokens,"
                " cached_tokens, turns FROM usage WHERE day >= ?",
                (since,),
            )
        }
        runs: dict[RunCell, int] = {
            (principal, hour, session): n
            for principal, hour, session, n in conn.execute(
                "SELECT principal, hour, session_id, runs FROM usage_runs WHERE hour >= ?",
                (since,),
            )
        }
        self.totals.add(cells, runs)


class UsageRow(msgspec.Struct, frozen=True, kw_only=True):
    """One group of ``GET /v1/usage``: tokens, runs and cost of one principal, session or
    model over the asked days."""

    key: str
    """The principal, the session id or the model."""
    input_tokens: int
    output_tokens: int
    cached_tokens: int
    tokens: int
    """Input plus output."""
    turns: int
    """Provider answers."""
    cost: float | None
    """By ``[usage.prices]``; null when a model of the group has no price (``unpriced``)."""
    unpriced: tuple[str, ...] = ()
    """The group's models with no price (their tokens are not in ``cost``)."""


class UsageReport(msgspec.Struct, frozen=True, kw_only=True):
    """``GET /v1/usage``'s body and ``reel usage --json``."""

    by: str
    from_day: str = msgspec.field(name="from")
    to_day: str = msgspec.field(name="to")
    rows: tuple[UsageRow, ...]
    total: UsageRow
    """Every row summed (``key``: ``total``)."""


def report(
    by: Grouping,
    from_day: str,
    to_day: str,
    cells: Iterable[tuple[str, str, str, TokenCounts]],
    prices: Mapping[str, Price],
) -> UsageReport:
    """Sum ``cells`` (principal, group key, model, tokens) into rows, each priced by model."""
    groups: dict[str, dict[str, TokenCounts]] = {}
    for _principal, key, model, tokens in cells:
        models = groups.setdefault(key, {})
        models[model] = models.get(model, TokenCounts()) + tokens
    everything: dict[str, TokenCounts] = {}
    for models in groups.values():
        for model, tokens in models.items():
            everything[model] = everything.get(model, TokenCounts()) + tokens
    rows = tuple(_row(key, groups[key], prices) for key in sorted(groups))
    return UsageReport(
        by=by, from_day=from_day, to_day=to_day, rows=rows, total=_row("total", everything, prices)
    )


def _row(key: str, models: Mapping[str, TokenCounts], prices: Mapping[str, Price]) -> UsageRow:
    summed = sum(models.values(), TokenCounts())
    unpriced = tuple(sorted(m for m in models if m not in prices))
    return UsageRow(
        key=key,
        input_tokens=summed.input_tokens,
        output_tokens=summed.output_tokens,
        cached_tokens=summed.cached_tokens,
        tokens=summed.tokens,
        turns=summed.turns,
        cost=None if unpriced else total_cost(models, prices),
        unpriced=unpriced,
    )


_CELLS = "SUM(input_tokens), SUM(output_tokens), SUM(cached_tokens), SUM(turns)"


def _tokens(row: tuple[Any, ...]) -> TokenCounts:
    return TokenCounts(
        input_tokens=int(row[0] or 0),
        output_tokens=int(row[1] or 0),
        cached_tokens=int(row[2] or 0),
        turns=int(row[3] or 0),
    )


class UsageView(PooledReader):
    """Typed queries over the usage tables of views.db (read-only, pooled, thread-safe)."""

    def __init__(self, path: Path, totals: UsageTotals, limits: ReaderLimits | None = None) -> None:
        super().__init__(path, limits)
        self._totals = totals
        """The fold's totals in memory (``UsageProjection.totals``), which keep :meth:`totals`."""

    def cells(
        self, by: Grouping, from_day: str, to_day: str
    ) -> list[tuple[str, str, str, TokenCounts]]:
        """(principal, group key, model, tokens) over the days ``from_day``..``to_day``
        (inclusive): the principal kept apart, so a caller can drop those it may not read
        before :func:`report` sums."""
        column = GROUPINGS[by]  # one of ours, never the caller's text
        sql = (
            f"SELECT principal, {column}, model, {_CELLS} FROM usage"
            f" WHERE day BETWEEN ? AND ? GROUP BY principal, {column}, model"
        )
        with self._borrow() as conn:
            rows = conn.execute(sql, (from_day, to_day)).fetchall()
        return [(str(r[0]), str(r[1]), str(r[2]), _tokens(r[3:])) for r in rows]

    def totals(self) -> dict[str, TokenCounts]:
        """Every model's tokens since the journal began (``/metrics``)."""
        return {m: _counts(c) for m, c in self._totals.all_time(self._all_time).items()}

    def _all_time(self) -> tuple[int, dict[str, Sums]]:
        """The usage view's position and its sums by model, read in one transaction."""
        with self._borrow() as conn, conn:  # one read transaction: the position and the sums
            row = conn.execute(
                "SELECT position FROM projection_checkpoints WHERE name = ?",
                (UsageProjection.name,),
            ).fetchone()
            rows = conn.execute(f"SELECT model, {_CELLS} FROM usage GROUP BY model").fetchall()
        position = 0 if row is None else row[0]  # the projector makes the row before it folds
        return int(position), {str(r[0]): [int(v or 0) for v in r[1:]] for r in rows}


def load_usage(reader: JournalReadPort) -> Iterator[tuple[str, str, str, str, TokenCounts]]:
    """Every usage row the journal folds to, as (day, principal, session, model, tokens), for
    commands that read a stopped node's journal: the view's own fold, run in memory."""
    with folded(UsageProjection(), reader.events_of_kinds(USAGE_KINDS)) as conn:
        rows = conn.execute(
            "SELECT day, principal, session_id, model, input_tokens, output_tokens,"
            " cached_tokens, turns FROM usage ORDER BY day, principal, session_id, model"
        ).fetchall()
    for row in rows:
        yield str(row[0]), str(row[1]), str(row[2]), str(row[3]), _tokens(row[4:])
