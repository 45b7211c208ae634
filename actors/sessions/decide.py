"""What a session decides: pure functions of its folded state (:mod:`actors.sessions.state`).

The session actor (:mod:`actors.sessions.actor`) is the shell: it picks ids, reads the clock and the
run registry, asks here what to append, appends it at ``state.next_seq``, folds what the
journal stored and does what follows (starting a run, answering the caller). The offline CLI
(``reel sessions restore`` on a stopped node) asks the same :func:`decide`. Compaction's own
decisions (which runs, the summary) are in :mod:`actors.sessions.compaction`; whether an automatic
one is due is :func:`compaction_due`, from the commit time of the last checkpoint that the fold
keeps.

A refusal is an :mod:`actors.errors` exception naming the field; nothing is appended then.
"""

from __future__ import annotations

from collections.abc import Collection, Container

from actors.approvals.grants import Grant
from actors.budgets.decide import Breach
from actors.errors import InvalidCommand
from actors.messages import (
    CreateSession,
    GrantAdded,
    ResetSession,
    ResolveSession,
    RestoreSession,
    SetSessionPosture,
    StartRun,
)
from actors.sessions.compaction import Limits
from actors.sessions.state import SessionState, checkpoint_of
from events.catalog import (
    BudgetRefused,
    Event,
    RunAccepted,
    SessionCreated,
    SessionGrantAdded,
    SessionPostureSet,
    SessionReset,
    SessionRestored,
)

SessionCommand = (
    StartRun | ResetSession | ResolveSession | GrantAdded | SetSessionPosture | RestoreSession
)
"""The commands a session answers by appending to its own stream."""


def created(session_id: str, command: CreateSession) -> SessionCreated:
    """``session.created``: the first event of a new session's stream."""
    return SessionCreated(
        session_id=session_id,
        session_key=command.session_key,
        label=command.label,
        parent_session_id=command.parent_session_id,
        branched_from_run_id=command.branched_from_run_id,
        history=command.history,
    )


def decide(
    state: SessionState,
    command: SessionCommand,
    *,
    run_id: str = "",
    tools: Container[str] = (),
) -> tuple[Event, ...]:
    """The events ``command`` appends to the session's stream (none: it changes nothing).

    ``run_id``: the id a :class:`StartRun` without one gets (the shell's id source); a run the
    session already accepted is not accepted again (a command asked again after a crash).
    ``tools``: the node's tools (a posture names one of them)."""
    if isinstance(command, StartRun):
        run = command.run_id or run_id
        if run in state.runs:
            return ()
        return (
            RunAccepted(
                run_id=run,
                session_id=state.session_id,
                text=command.text,
                channel=command.channel,
            ),
        )
    if isinstance(command, ResetSession | ResolveSession):
        reset = isinstance(command, ResetSession) or command.reset
        return (SessionReset(session_id=state.session_id),) if reset else ()
    if isinstance(command, GrantAdded):
        return () if holds(state, command.grant) else (grant_added(state, command.grant),)
    if isinstance(command, SetSessionPosture):
        if command.tool not in tools:
            raise InvalidCommand("tool", f"unknown tool {command.tool!r}")
        return (
            SessionPostureSet(
                session_id=state.session_id, tool=command.tool, posture=command.posture
            ),
        )
    return (restored(state, command.checkpoint_id),)


def refused(state: SessionState, breach: Breach) -> BudgetRefused:
    """``budget.refused``: a message refused before a run was accepted for it (the breach
    names the budget, whom it counted and how far it got)."""
    return BudgetRefused(
        session_id=state.session_id,
        budget=breach.budget,
        scope=breach.scope,
        subject=breach.subject,
        counted=breach.counted,
        measure=breach.measure,
        period_key=breach.period_key,
        used=breach.used,
        limit=breach.limit,
    )


def holds(state: SessionState, grant: Grant) -> bool:
    """Whether the session already holds a grant with ``grant``'s tool and binding."""
    return any(g.key == grant.key for g in state.grants)


def grant_added(state: SessionState, grant: Grant) -> SessionGrantAdded:
    return SessionGrantAdded(
        session_id=state.session_id,
        tool=grant.tool,
        approval_id=grant.approval_id,
        match=grant.match,
        prefix=grant.prefix,
        arguments_digest=grant.digest,
    )


def restored(state: SessionState, checkpoint_id: str) -> SessionRestored:
    """The event returning ``state`` to checkpoint ``checkpoint_id``; an unknown one is refused
    naming the field ``checkpoint``."""
    if checkpoint_of(state, checkpoint_id) is None:
        known = len(state.checkpoints)
        raise InvalidCommand(
            "checkpoint",
            f"session {state.session_id} has no checkpoint {checkpoint_id[:64]!r} "
            f"({known} checkpoint{'' if known == 1 else 's'})",
        )
    return SessionRestored(session_id=state.session_id, checkpoint_id=checkpoint_id)


def branch_history(
    state: SessionState, run_id: str | None, unfinished: Collection[str]
) -> tuple[str, ...]:
    """The history a branch at ``run_id`` (default: the last finished run) starts with: the
    visible history up to it, without the ``unfinished`` runs (live or queued). A run that is
    not a finished run of the visible history is refused naming the field ``run_id``."""
    visible = tuple(r for r in state.history if r not in unfinished)
    if run_id is None:
        return visible
    if run_id not in visible:
        raise InvalidCommand(
            "run_id",
            f"run {run_id} is not a finished run in session {state.session_id}'s history",
        )
    return visible[: visible.index(run_id) + 1]


def compaction_due(
    state: SessionState, history_tokens: int, limits: Limits, *, now_ms: int, cooldown_s: float
) -> bool:
    """Whether an automatic compaction is due after a run: the history (``history_tokens``,
    :func:`actors.sessions.compaction.history_tokens`) is over the threshold, and the session's last
    compaction was recorded at least ``cooldown_s`` before ``now_ms`` (commit times, from
    the fold: never a second read of the journal)."""
    if history_tokens <= limits.threshold:
        return False
    if not state.checkpoints:
        return True
    return now_ms - state.checkpoints[-1].at_ms >= cooldown_s * 1000
