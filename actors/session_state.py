"""A session's state: a pure fold of the events on its stream ``session/<id>``."""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from actors.grants import Grant, from_event
from events.catalog import (
    Event,
    RunAccepted,
    SessionCreated,
    SessionGrantAdded,
    SessionPostureSet,
    SessionReset,
)


class Compaction(msgspec.Struct, frozen=True, kw_only=True):
    """The summary that stands in for a session's older runs in every later run's context
    (the context assembler, :mod:`actors.context`, puts it after the system prompt and leaves
    the ``covers`` runs out)."""

    compaction_id: str
    summary: str
    """As stored (redacted)."""
    covers: tuple[str, ...]
    """The runs the summary condenses, oldest first."""


class SessionState(msgspec.Struct, frozen=True, kw_only=True):
    """Everything a session actor knows, rebuilt identically from its stream on wake-up."""

    session_id: str
    session_key: str | None = None
    label: str | None = None
    parent_session_id: str | None = None
    branched_from_run_id: str | None = None
    runs: tuple[str, ...] = ()
    """Every run accepted in this session, in order."""
    history: tuple[str, ...] = ()
    """The runs the next run sees as prior turns (inherited on a branch; emptied by reset)."""
    grants: tuple[Grant, ...] = ()
    """Grants with scope ``session`` since the last reset, in the order they were made (one per
    distinct tool and binding)."""
    compaction: Compaction | None = None
    """The summary in force (set by compaction or a restore, cleared by a reset)."""
    postures: tuple[tuple[str, str], ...] = ()
    """Per-session posture overrides, (tool, posture), sorted."""
    resets: int = 0
    next_seq: int = 0
    """The ``stream_seq`` the session's next event gets."""


def apply(state: SessionState | None, event: Event) -> SessionState:
    """Fold one event of the session's stream."""
    if isinstance(event, SessionCreated):
        return SessionState(
            session_id=event.session_id,
            session_key=event.session_key,
            label=event.label,
            parent_session_id=event.parent_session_id,
            branched_from_run_id=event.branched_from_run_id,
            history=event.history,
            next_seq=1,
        )
    if state is None:
        raise ValueError(f"{type(event).__name__} before session.created")
    nxt = state.next_seq + 1
    if isinstance(event, RunAccepted):
        return msgspec.structs.replace(
            state,
            runs=(*state.runs, event.run_id),
            history=(*state.history, event.run_id),
            next_seq=nxt,
        )
    if isinstance(event, SessionReset):
        return msgspec.structs.replace(
            state, history=(), grants=(), resets=state.resets + 1, next_seq=nxt
        )
    if isinstance(event, SessionPostureSet):
        postures = {tool: p for tool, p in state.postures if tool != event.tool}
        if event.posture is not None:
            postures[event.tool] = event.posture
        return msgspec.structs.replace(
            state, postures=tuple(sorted(postures.items())), next_seq=nxt
        )
    if isinstance(event, SessionGrantAdded):
        grant = from_event(event)
        if any(g.key == grant.key for g in state.grants):
            return msgspec.structs.replace(state, next_seq=nxt)
        return msgspec.structs.replace(state, grants=(*state.grants, grant), next_seq=nxt)
    return msgspec.structs.replace(state, next_seq=nxt)


def fold(events: Iterable[Event]) -> SessionState | None:
    """The state after all ``events`` (None for an empty stream)."""
    state: SessionState | None = None
    for event in events:
        state = apply(state, event)
    return state


def history_until(state: SessionState, run_id: str | None) -> tuple[str, ...]:
    """The visible history up to and including ``run_id`` (all of it when None).

    Raises ValueError when the run is not in the visible history (reset away, or another
    session's run)."""
    if run_id is None:
        return state.history
    if run_id not in state.history:
        raise ValueError(f"run {run_id} is not in session {state.session_id}'s history")
    return state.history[: state.history.index(run_id) + 1]
