"""A session's state: a pure fold of the records on its stream ``session/<id>`` (an
:class:`actors.aggregate.Aggregate`: ``fold(actors.sessions.state, records)``). What a session
decides on it is in :mod:`actors.sessions.decide`.

Compaction and checkpoints (docs/context.md, "Compaction"): ``session.compacted`` puts a
summary in force and records a checkpoint (the compaction and the history at that point);
``session.restored`` puts a checkpoint's summary and history back; ``session.reset`` clears the
summary and the history but keeps the checkpoints, so a restore can still return to one made
before the reset (the reset's dropped grants stay dropped: a checkpoint holds no grants).
"""

from __future__ import annotations

import msgspec

from actors.approvals.grants import Grant, grant_of
from actors.stream import Recorded
from events.catalog import (
    CompactionTrigger,
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
    (the context assembler, :mod:`actors.runs.context`, puts it after the system prompt and leaves
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


class SessionCheckpoint(msgspec.Struct, frozen=True, kw_only=True):
    """A point a session's context can be restored to: made by every compaction."""

    compaction: Compaction
    history: tuple[str, ...]
    """The session's visible history when the compaction was made."""
    seq: int
    """The ``stream_seq`` of its ``session.compacted``."""
    at_ms: int = 0
    """The commit time of its ``session.compacted`` (the cool-down between automatic
    compactions counts from it)."""
    principal: str = ""
    """Who caused it (``node`` for an automatic compaction)."""
    trigger: CompactionTrigger = "request"

    @property
    def checkpoint_id(self) -> str:
        return self.compaction.compaction_id


class PostureOverride(msgspec.Struct, frozen=True, kw_only=True):
    """A tool's posture in one session, and who set it when (its ``session.posture_set``)."""

    tool: str
    posture: str
    set_by: str
    set_at_ms: int


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
    checkpoints: tuple[SessionCheckpoint, ...] = ()
    """Every compaction of the session, oldest first (a reset keeps them)."""
    postures: tuple[PostureOverride, ...] = ()
    """Per-session posture overrides, sorted by tool."""
    resets: int = 0
    next_seq: int = 0
    """The ``stream_seq`` the session's next event gets."""

    @property
    def stream(self) -> str:
        return stream_of(self.session_id)

    @property
    def overrides(self) -> dict[str, str]:
        """The posture overrides, tool -> posture (what the gate takes)."""
        return {o.tool: o.posture for o in self.postures}


def initial(first: Recorded) -> SessionState | None:
    """The session ``session.created`` starts (None for any other record)."""
    event = first.event
    if not isinstance(event, SessionCreated) or first.stream != stream_of(event.session_id):
        return None
    return SessionState(
        session_id=event.session_id,
        session_key=event.session_key,
        label=event.label,
        parent_session_id=event.parent_session_id,
        branched_from_run_id=event.branched_from_run_id,
        history=event.history,
        next_seq=1,
    )


def apply(state: SessionState, rec: Recorded) -> SessionState:
    """Fold one record of the session's stream (total: a record of another stream changes
    nothing, one the session ignores only moves ``next_seq``)."""
    if rec.stream != state.stream:
        return state
    event = rec.event
    replace = msgspec.structs.replace
    nxt = state.next_seq + 1
    if isinstance(event, RunAccepted):
        return replace(
            state,
            runs=(*state.runs, event.run_id),
            history=(*state.history, event.run_id),
            next_seq=nxt,
        )
    if isinstance(event, SessionReset):
        return replace(
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
        checkpoint = SessionCheckpoint(
            compaction=compaction,
            history=state.history,
            seq=state.next_seq,
            at_ms=rec.at_ms,
            principal=rec.principal,
            trigger=event.trigger,
        )
        return replace(
            state,
            compaction=compaction,
            checkpoints=(*state.checkpoints, checkpoint),
            next_seq=nxt,
        )
    if isinstance(event, SessionRestored):
        restored = checkpoint_of(state, event.checkpoint_id)
        if restored is None:  # never appended: the decider refuses an unknown checkpoint
            return replace(state, next_seq=nxt)
        return replace(
            state, compaction=restored.compaction, history=restored.history, next_seq=nxt
        )
    if isinstance(event, SessionPostureSet):
        postures = [o for o in state.postures if o.tool != event.tool]
        if event.posture is not None:
            postures.append(
                PostureOverride(
                    tool=event.tool,
                    posture=event.posture,
                    set_by=rec.principal,
                    set_at_ms=rec.at_ms,
                )
            )
        return replace(state, postures=tuple(sorted(postures, key=lambda o: o.tool)), next_seq=nxt)
    if isinstance(event, SessionGrantAdded):
        grant = grant_of(event)
        if any(g.key == grant.key for g in state.grants):
            return replace(state, next_seq=nxt)
        return replace(state, grants=(*state.grants, grant), next_seq=nxt)
    return replace(state, next_seq=nxt)


def stream_of(session_id: str) -> str:
    return f"session/{session_id}"


def checkpoint_of(state: SessionState, checkpoint_id: str) -> SessionCheckpoint | None:
    """The session's checkpoint with this id, or None."""
    for checkpoint in state.checkpoints:
        if checkpoint.checkpoint_id == checkpoint_id:
            return checkpoint
    return None
