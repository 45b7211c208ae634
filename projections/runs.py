"""The runs view: state, termination reason, timings, token usage and tool call counts."""

from __future__ import annotations

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

    def apply(self, conn: apsw.Connection, stored: StoredEvent, event: Event) -> None:
        at = stored.recorded_at_ms
        if isinstance(event, RunAccepted):
            conn.execute(
                "INSERT OR REPLACE INTO runs(run_id, session_id, principal, state, accepted_at_ms)"
                " VALUES (?,?,?,?,?)",
                (event.run_id, event.session_id, stored.principal, RunStatus.ACCEPTED, at),
            )
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
            state = STATUS_OF[type(event)]
            message = (
                event.message
                if isinstance(event, RunFailed)
                else event.requested_by
                if isinstance(event, RunCancelled)
                else None
            )
            answer = event.answer if isinstance(event, RunCompleted) else None
            conn.execute(
                "UPDATE runs SET state = ?, termination_reason = ?, message = ?, answer = ?,"
                " ended_at_ms = ? WHERE run_id = ?",
                (state, event.reason, message, answer, at, event.run_id),
            )

    @staticmethod
    def _state(conn: apsw.Connection, run_id: str, state: str) -> None:
        conn.execute("UPDATE runs SET state = ? WHERE run_id = ?", (state, run_id))
