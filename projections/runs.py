"""The runs view: state, termination reason, timings, token usage and tool call counts.

A run accepted in the batch being folded is kept as a row in memory until the batch's
:meth:`RunsProjection.flush` writes it (one statement for the run's whole life in that batch,
where each of its events was a statement: a rebuild folds every run in the batch that accepts
it); an event of a run accepted in an earlier batch updates its row in the table, as before.
:meth:`RunsProjection.reset` forgets the rows of a batch that rolled back."""

from __future__ import annotations

from typing import Any

import apsw

from events import Event, StoredEvent
from events.catalog import (
    RunAccepted,
    RunAwaitingApproval,
    RunCancelled,
    RunCompleted,
    RunFailed,
    RunResumed,
    RunStarted,
    RunTurnCompleted,
    ToolProposed,
    kinds_of,
)
from events.lifecycle import (
    REFERENCE_CALL_PREFIX,
    STATUS_OF,
    STATUS_OF_KIND,
    TERMINAL_EVENTS,
    RunEnd,
    RunStatus,
)


class RunsProjection:
    name: str = "runs"
    version: int = 2
    """2: ``tool_calls`` no longer counts the reads of a message's references (``ref-N``)."""
    tables: tuple[str, ...] = ("runs",)
    kinds: frozenset[str] | None = frozenset(
        {*STATUS_OF_KIND, *kinds_of(RunTurnCompleted, ToolProposed)}
    )
    ddl: str = """
    CREATE TABLE IF NOT EXISTS runs(
        run_id TEXT PRIMARY KEY,
        session_id TEXT NOT NULL,
        principal TEXT NOT NULL,
        state TEXT NOT NULL,
        termination_reason TEXT,
        message TEXT,
        accepted_at_ms INTEGER NOT NULL,
        started_at_ms INTEGER,
        ended_at_ms INTEGER,
        turns INTEGER NOT NULL DEFAULT 0,
        tool_calls INTEGER NOT NULL DEFAULT 0,
        prompt_tokens INTEGER NOT NULL DEFAULT 0,
        completion_tokens INTEGER NOT NULL DEFAULT 0,
        answer TEXT
    );
    CREATE INDEX IF NOT EXISTS runs_by_session ON runs(session_id, accepted_at_ms);
    CREATE INDEX IF NOT EXISTS runs_by_state ON runs(state);
    """

    def __init__(self) -> None:
        self._rows: dict[str, list[Any]] = {}
        """Runs accepted in this batch: their rows (``_COLUMNS``' order), not yet written."""

    def apply(self, conn: apsw.Connection, stored: StoredEvent, event: Event) -> None:
        at = stored.recorded_at_ms
        if isinstance(event, RunAccepted):
            # INSERT OR REPLACE at the flush: the row as a fresh acceptance leaves it.
            self._rows[event.run_id] = [
                event.run_id,
                event.session_id,
                stored.principal,
                RunStatus.ACCEPTED,
                None,
                None,
                at,
                None,
                None,
                0,
                0,
                0,
                0,
                None,
            ]
            return
        row = self._rows.get(getattr(event, "run_id", ""))
        if row is not None:
            self._fold_row(row, event, at)
        elif isinstance(event, RunStarted):
            conn.execute(
                "UPDATE runs SET state = ?, started_at_ms = ? WHERE run_id = ?",
                (RunStatus.IN_PROGRESS, at, event.run_id),
            )
        elif isinstance(event, RunAwaitingApproval | RunResumed):
            self._state(conn, event.run_id, STATUS_OF[type(event)])
        elif isinstance(event, RunTurnCompleted):
            conn.execute(
                "UPDATE runs SET turns = turns + 1, prompt_tokens = prompt_tokens + ?,"
                " completion_tokens = completion_tokens + ? WHERE run_id = ?",
                (event.prompt_tokens, event.completion_tokens, event.run_id),
            )
        elif isinstance(event, ToolProposed) and not event.call_id.startswith(
            REFERENCE_CALL_PREFIX
        ):
            conn.execute(
                "UPDATE runs SET tool_calls = tool_calls + 1 WHERE run_id = ?", (event.run_id,)
            )
        elif isinstance(event, TERMINAL_EVENTS):
            conn.execute(
                "UPDATE runs SET state = ?, termination_reason = ?, message = ?, answer = ?,"
                " ended_at_ms = ? WHERE run_id = ?",
                (*self._ending(event), at, event.run_id),
            )

    @staticmethod
    def _state(conn: apsw.Connection, run_id: str, state: str) -> None:
        conn.execute("UPDATE runs SET state = ? WHERE run_id = ?", (state, run_id))

    def flush(self, conn: apsw.Connection) -> None:
        """Write the rows of the runs accepted in this batch (inside its transaction)."""
        if self._rows:
            conn.executemany(_INSERT, self._rows.values())
            self._rows = {}

    def reset(self) -> None:
        """The batch rolled back: forget its rows."""
        self._rows = {}

    @staticmethod
    def _fold_row(row: list[Any], event: Event, at: int) -> None:
        """What :meth:`apply`'s statements do to a row, done to a row in memory."""
        if isinstance(event, RunStarted):
            row[_STATE], row[_STARTED] = RunStatus.IN_PROGRESS, at
        elif isinstance(event, RunAwaitingApproval | RunResumed):
            row[_STATE] = STATUS_OF[type(event)]
        elif isinstance(event, RunTurnCompleted):
            row[_TURNS] += 1
            row[_PROMPT] += event.prompt_tokens
            row[_COMPLETION] += event.completion_tokens
        elif isinstance(event, ToolProposed) and not event.call_id.startswith(
            REFERENCE_CALL_PREFIX
        ):
            row[_CALLS] += 1
        elif isinstance(event, TERMINAL_EVENTS):
            row[_STATE], row[_REASON], row[_MESSAGE], row[_ANSWER] = RunsProjection._ending(event)
            row[_ENDED] = at

    @staticmethod
    def _ending(event: RunEnd) -> tuple[RunStatus, str, str | None, str | None]:
        """A run's end as the row holds it: state, termination reason, message, answer."""
        message = (
            event.message
            if isinstance(event, RunFailed)
            else event.requested_by
            if isinstance(event, RunCancelled)
            else None
        )
        answer = event.answer if isinstance(event, RunCompleted) else None
        return STATUS_OF[type(event)], event.reason, message, answer


_COLUMNS = (
    "run_id",
    "session_id",
    "principal",
    "state",
    "termination_reason",
    "message",
    "accepted_at_ms",
    "started_at_ms",
    "ended_at_ms",
    "turns",
    "tool_calls",
    "prompt_tokens",
    "completion_tokens",
    "answer",
)
"""A buffered row's values, in this order."""
_INSERT = (
    f"INSERT OR REPLACE INTO runs({', '.join(_COLUMNS)}) VALUES ({', '.join('?' * len(_COLUMNS))})"
)
_STATE, _REASON, _MESSAGE = (_COLUMNS.index(c) for c in ("state", "termination_reason", "message"))
_STARTED, _ENDED, _ANSWER = (_COLUMNS.index(c) for c in ("started_at_ms", "ended_at_ms", "answer"))
_TURNS, _CALLS = _COLUMNS.index("turns"), _COLUMNS.index("tool_calls")
_PROMPT, _COMPLETION = _COLUMNS.index("prompt_tokens"), _COLUMNS.index("completion_tokens")
