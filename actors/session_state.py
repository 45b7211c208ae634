"""A session's state: a pure fold of the events on its stream ``session/<id>``.

Compaction and checkpoints (docs/context.md, "Compaction"): ``session.compacted`` puts a
summary in force and records a checkpoint (the compaction and the history at that point);
``session.restored`` puts a checkpoint's summary and history back; ``session.reset`` clears the
summary and the history but keeps the checkpoints, so a restore can still return to one made
before the reset (the reset's dropped grants stay dropped: a checkpoint holds no grants).
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from actors.grants import Grant, grant_of
from events.catalog import (
    Event,
    RunAccepted,
    SessionCompacted,
    SessionCreated,
    SessionGrantAdded,
    SessionPostureSet,
    SessionReset,
    SessionRestored,
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
    method: str = "extractive"
    """``extractive`` or ``model`` (:data:`events.catalog.CompactionMethod`)."""
    tokens_before: int = 0
    tokens_after: int = 0
    """Estimated tokens of the session's history before and after the compaction."""


class Checkpoint(msgspec.Struct, frozen=True, kw_only=True):
    """A point a session's context can be restored to: made by every compaction."""

    compaction: Compaction
    history: tuple[str, ...]
    """The session's visible history when the compaction was made."""
    seq: int
    """The ``stream_seq`` of its ``session.compacted`` (its time is that row's)."""

    @property
    def checkpoint_id(self) -> str:
        return self.compaction.compaction_id


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
    checkpoints: tuple[Checkpoint, ...] = ()
    """Every compaction of the session, oldest first (a reset keeps them)."""
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
            state, history=(), grants=(), compaction=None, resets=state.resets + 1, next_seq=nxt
        )
    if isinstance(event, SessionCompacted):
        compaction = Compaction(
            compaction_id=event.compaction_id,
            summary=event.summary,
            covers=event.covers,
            method=event.method,
            tokens_before=event.tokens_before,
            tokens_after=event.tokens_after,
        )
        checkpoint = Checkpoint(compaction=compaction, history=state.history, seq=state.next_seq)
        return msgspec.structs.replace(
            state,
            compaction=compaction,
            checkpoints=(*state.checkpoints, checkpoint),
            next_seq=nxt,
        )
    if isinstance(event, SessionRestored):
        restored = checkpoint_of(state, event.checkpoint_id)
        if restored is None:
            raise ValueError(f"session.restored names unknown checkpoint {event.checkpoint_id}")
        return msgspec.structs.replace(
            state, compaction=restored.compaction, history=restored.history, next_seq=nxt
        )
    if isinstance(event, SessionPostureSet):
        postures = {tool: p for tool, p in state.postures if tool != event.tool}
        if event.posture is not None:
            postures[event.tool] = event.posture
        return msgspec.structs.replace(
            state, postures=tuple(sorted(postures.items())), next_seq=nxt
        )
    if isinstance(event, SessionGrantAdded):
        grant = grant_of(event)
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


def checkpoint_of(state: SessionState, checkpoint_id: str) -> Checkpoint | None:
    """The session's checkpoint with this id, or None."""
    for checkpoint in state.checkpoints:
        if checkpoint.checkpoint_id == checkpoint_id:
            return checkpoint
    return None


def history_until(state: SessionState, run_id: str | None) -> tuple[str, ...]:
    """The visible history up to and including ``run_id`` (all of it when None).

    Raises ValueError when the run is not in the visible history (reset away, or another
    session's run)."""
    if run_id is None:
        return state.history
    if run_id not in state.history:
        raise ValueError(f"run {run_id} is not in session {state.session_id}'s history")
    return state.history[: state.history.index(run_id) + 1]
