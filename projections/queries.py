"""Reading the views: what the HTTP and gRPC transports serve. Safe from many threads; never
writes (the projector owns views.db for writing)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, TypeVar

import apsw
import msgspec

from events import Event
from events.codec import AnyEvent
from events.lifecycle import TERMINAL_STATUSES, is_terminal
from projections.pool import PooledReader, ReaderLimits
from projections.records import (
    ApprovalRecord,
    RawTapeRecord,
    RunRecord,
    SessionRecord,
    TapeRecord,
    ToolUsageRecord,
)

R = TypeVar("R", bound=msgspec.Struct)
ENDED_CACHE = 4096
"""How many ended runs' rows ``Views.run`` keeps (oldest dropped first)."""
_json = msgspec.json.Decoder()
_event_json: msgspec.json.Decoder[Event] = msgspec.json.Decoder(AnyEvent)
_TAPE_RAW = (
    "SELECT run_id, tape_seq, position, kind, stream, recorded_at_ms, entry FROM tape"
    " WHERE run_id = ? AND tape_seq > ? ORDER BY tape_seq LIMIT ?"
)


APPROVAL_STATES: tuple[str, ...] = ("pending", "resolved")
"""The states the approvals view records (``approvals.state``)."""


class ApprovalFilter(msgspec.Struct, frozen=True, kw_only=True):
    """Which approvals a list keeps: each field that is set keeps only the rows whose column of
    the same name holds exactly that value; None keeps any. Shared by every transport that
    lists approvals, so HTTP and gRPC filter alike."""

    state: str | None = None
    """One of :data:`APPROVAL_STATES`."""
    run_id: str | None = None
    session_id: str | None = None
    tool: str | None = None
    principal: str | None = None
    """Who the run that asks acts for (the principal recorded on the request)."""
    decided_by: str | None = None
    """Who resolved it (only resolved approvals match)."""


class RunFilter(msgspec.Struct, frozen=True, kw_only=True):
    """Which runs a list keeps (as :class:`ApprovalFilter`: set fields must match exactly)."""

    state: str | None = None
    """One of :class:`events.lifecycle.RunStatus` (what ``runs.state`` holds)."""
    session_id: str | None = None
    principal: str | None = None
    """Who the run acts for (the principal recorded on ``run.accepted``)."""


class SessionFilter(msgspec.Struct, frozen=True, kw_only=True):
    """Which sessions a list keeps (as :class:`ApprovalFilter`)."""

    principal: str | None = None
    """Who created the session (its owner)."""


def page_sql(
    table: str,
    key: str,
    where: msgspec.Struct,
    after: str | None,
    limit: int,
    newest_first: bool = False,
) -> tuple[str, tuple[Any, ...]]:
    """``SELECT *`` of ``table`` in ``key`` order after ``after`` (the keys are ULIDs: creation
    order; ``newest_first``: descending, ``after`` then means "older than"), narrowed by the
    set fields of ``where`` (field names are column names: ours, never the caller's), and its
    arguments."""
    clauses: list[str] = []
    args: list[Any] = []
    if not newest_first:
        clauses.append(f"{key} > ?")
        args.append(after or "")
    elif after is not None:
        clauses.append(f"{key} < ?")
        args.append(after)
    for column, value in msgspec.structs.asdict(where).items():
        if value is not None:
            clauses.append(f"{column} = ?")
            args.append(value)
    args.append(limit)
    where_sql = f" WHERE {' AND '.join(clauses)}" if clauses else ""
    order = " DESC" if newest_first else ""
    return f"SELECT * FROM {table}{where_sql} ORDER BY {key}{order} LIMIT ?", tuple(args)


def typed_rows(
    conn: apsw.Connection, cls: type[R], sql: str, args: tuple[Any, ...] = ()
) -> list[R]:
    """The rows ``sql`` selects (every column of a view's table) as ``cls``: how the views
    and an offline fold of one (:func:`projections.base.folded`) read their rows."""
    return _typed(cls, *_fetch(conn, sql, args))


def _fetch(
    conn: apsw.Connection, sql: str, args: tuple[Any, ...]
) -> tuple[list[str], list[tuple[Any, ...]]]:
    cur = conn.execute(sql, args)
    try:
        names = [d[0] for d in cur.getdescription()]
    except apsw.ExecutionCompleteError:  # no rows: apsw has nothing to describe
        return [], []
    return names, cur.fetchall()


def _typed(cls: type[R], names: list[str], raw: list[tuple[Any, ...]]) -> list[R]:
    out = []
    for row in raw:
        values: dict[str, Any] = dict(zip(names, row, strict=True))
        if cls is TapeRecord:
            values["event"] = _event_json.decode(values.pop("entry"))
        elif cls is ApprovalRecord:
            values["arguments"] = _json.decode(values["arguments"])
        out.append(cls(**values))  # the rows are ours: no validation pass needed
    return out


class Views(PooledReader):
    """Typed queries over views.db."""

    def __init__(self, path: Path, limits: ReaderLimits | None = None) -> None:
        super().__init__(path, limits)
        self._guard = threading.Lock()
        """Held while the caches of ended runs change."""
        self._ended: dict[str, RunRecord] = {}
        self._final_pages: dict[tuple[str, int, int], list[RawTapeRecord]] = {}

    def _rows(self, cls: type[R], sql: str, args: tuple[Any, ...] = ()) -> list[R]:
        with self._borrow() as conn:
            names, raw = _fetch(conn, sql, args)
        return _typed(cls, names, raw)  # decoded once the connection is back in the pool

    def sessions(
        self,
        after: str | None = None,
        limit: int = 100,
        where: SessionFilter | None = None,
        *,
        newest_first: bool = False,
    ) -> list[SessionRecord]:
        """Sessions ordered by id (creation order), after the given id, narrowed by ``where``."""
        sql = page_sql(
            "sessions", "session_id", where or SessionFilter(), after, limit, newest_first
        )
        return self._rows(SessionRecord, *sql)

    def session(self, session_id: str) -> SessionRecord | None:
        rows = self._rows(
            SessionRecord, "SELECT * FROM sessions WHERE session_id = ?", (session_id,)
        )
        return rows[0] if rows else None

    def runs(
        self,
        where: RunFilter | None = None,
        after: str | None = None,
        limit: int = 100,
        *,
        newest_first: bool = False,
    ) -> list[RunRecord]:
        """Runs by id (acceptance order) after the given run id, narrowed by ``where``."""
        sql = page_sql("runs", "run_id", where or RunFilter(), after, limit, newest_first)
        return self._rows(RunRecord, *sql)

    def runs_of_session(
        self, session_id: str, after: str | None = None, limit: int = 100
    ) -> list[RunRecord]:
        """A session's runs in order, after the given run id."""
        return self.runs(RunFilter(session_id=session_id), after, limit)

    def run(self, run_id: str) -> RunRecord | None:
        """The run's row. Rows of ended runs never change again, so they are cached."""
        cached = self._ended.get(run_id)
        if cached is not None:
            return cached
        rows = self._rows(RunRecord, "SELECT * FROM runs WHERE run_id = ?", (run_id,))
        record = rows[0] if rows else None
        if record is not None and record.state in TERMINAL_STATUSES:
            with self._guard:
                if len(self._ended) >= ENDED_CACHE:
                    self._ended.pop(next(iter(self._ended)))
                self._ended[run_id] = record
        return record

    def tape(self, run_id: str, after_seq: int = -1, limit: int = 1000) -> list[TapeRecord]:
        """The run's tape entries with ``tape_seq > after_seq``, in order."""
        return self._rows(
            TapeRecord,
            "SELECT * FROM tape WHERE run_id = ? AND tape_seq > ? ORDER BY tape_seq LIMIT ?",
            (run_id, after_seq, limit),
        )

    def last_tape_seq(self, run_id: str) -> int:
        """The run's highest ``tape_seq`` (-1 when it has no entries yet)."""
        with self._borrow() as conn:
            value: Any = conn.execute(
                "SELECT max(tape_seq) FROM tape WHERE run_id = ?", (run_id,)
            ).get
        return -1 if value is None else int(value)

    def tape_raw(self, run_id: str, after_seq: int = -1, limit: int = 1000) -> list[RawTapeRecord]:
        """:meth:`tape` with each event as its stored JSON. A page that ends with the run's
        terminal entry can never change, so it is cached."""
        key = (run_id, after_seq, limit)
        cached = self._final_pages.get(key)
        if cached is not None:
            return cached
        with self._borrow() as conn:
            rows: list[tuple[Any, ...]] = conn.execute(_TAPE_RAW, key).fetchall()
        page = [
            RawTapeRecord(
                run_id=run_id_,
                tape_seq=tape_seq,
                position=position,
                kind=kind,
                stream=stream,
                recorded_at_ms=recorded_at_ms,
                event=msgspec.Raw(entry),
            )
            for run_id_, tape_seq, position, kind, stream, recorded_at_ms, entry in rows
        ]
        if page and is_terminal(page[-1].kind):
            with self._guard:
                if len(self._final_pages) >= ENDED_CACHE:
                    self._final_pages.pop(next(iter(self._final_pages)))
                self._final_pages[key] = page
        return page

    def approvals(
        self, state: str | None = None, after: str | None = None, limit: int = 100
    ) -> list[ApprovalRecord]:
        """Approvals by id (request order), optionally only pending or resolved."""
        return self.approvals_where(ApprovalFilter(state=state), after, limit)

    def approvals_where(
        self, where: ApprovalFilter, after: str | None = None, limit: int = 100
    ) -> list[ApprovalRecord]:
        """Approvals by id (request order) after the given id, narrowed by ``where``."""
        return self._rows(
            ApprovalRecord, *page_sql("approvals", "approval_id", where, after, limit)
        )

    def approval(self, approval_id: str) -> ApprovalRecord | None:
        rows = self._rows(
            ApprovalRecord, "SELECT * FROM approvals WHERE approval_id = ?", (approval_id,)
        )
        return rows[0] if rows else None

    def tool_usage(self) -> list[ToolUsageRecord]:
        return self._rows(ToolUsageRecord, "SELECT * FROM tool_usage ORDER BY tool")

    def run_states(self) -> dict[str, int]:
        """How many runs are in each state."""
        with self._borrow() as conn:
            rows: list[Any] = conn.execute(
                "SELECT state, count(*) FROM runs GROUP BY state"
            ).fetchall()
        return {str(state): int(n) for state, n in rows}

    def pending_approvals(self) -> int:
        with self._borrow() as conn:
            value: Any = conn.execute("SELECT count(*) FROM approvals WHERE state = 'pending'").get
        return int(value or 0)
