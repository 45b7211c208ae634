"""Messages the actors exchange.

Commands come from transports and carry a ``reply`` future that the actor which finally handles
the command resolves (with a value or an :mod:`actors.errors` exception); nobody inside the actor
system ever blocks on it. Internal messages are the replies actors send each other instead of
waiting on futures. All are frozen Structs; ``reply`` is an ordinary
:class:`concurrent.futures.Future`.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Literal

import msgspec

from actors.approvals.grants import Grant
from actors.provider import ProviderEvent
from actors.sessions.compaction import CompactionPlan
from actors.sessions.state import SessionState
from actors.stream import Recorded
from events.catalog import CompactionMethod, GrantMatch, GrantScope, Posture, Verdict

Reply = Future[Any] | None


def resolve(reply: Reply, value: Any) -> None:
    """Complete a command's reply (if anyone is waiting and it is not done yet)."""
    if reply is not None and not reply.done():
        reply.set_result(value)


def reject(reply: Reply, error: BaseException) -> None:
    """Fail a command's reply with ``error``."""
    if reply is not None and not reply.done():
        reply.set_exception(error)


# --- answers ---------------------------------------------------------------------------------


class RunTicket(msgspec.Struct, frozen=True, kw_only=True):
    """The answer to :class:`StartRun`: the run exists and is durable."""

    run_id: str
    session_id: str
    session_created: bool = False
    queued: bool = False
    """True when an earlier run of the session is still live; this one waits its turn."""


class SessionInfo(msgspec.Struct, frozen=True, kw_only=True):
    """The answer to session commands."""

    session_id: str
    session_key: str | None = None
    label: str | None = None
    parent_session_id: str | None = None
    created: bool = False
    reset_applied: bool = False


class CompactionOutcome(msgspec.Struct, frozen=True, kw_only=True):
    """The answer to :class:`CompactSession`: the compaction made (``compacted``), or decided
    and being written by the session's model (``writing``: ``session.compacted`` follows, and
    the summary and ``tokens_after`` are empty until then)."""

    session_id: str
    compaction_id: str
    """Also the id of the checkpoint it makes."""
    status: Literal["compacted", "writing"]
    method: CompactionMethod
    covers: tuple[str, ...]
    """Every run the new summary stands for, oldest first (the previous summary's too)."""
    condensed: int
    """How many of them this compaction condensed."""
    tokens_before: int
    tokens_after: int = 0
    summary: str = ""


# --- commands (transports -> directory) ------------------------------------------------------


class StartRun(msgspec.Struct, frozen=True, kw_only=True):
    """Start a run with ``text`` in a session named by id or key, or in a new session."""

    text: str
    session_id: str | None = None
    session_key: str | None = None
    create: bool = False
    """Create the session when the key is unknown (or when neither id nor key is given)."""
    label: str | None = None
    principal: str = "operator"
    channel: str | None = None
    reply: Reply = None
    session_created: bool = False
    """Set by the directory when it created the session for this message."""
    run_id: str | None = None
    """The run's id, chosen by the caller so that asking again after a crash finds the run it
    started: a session that already has ``run_id`` answers that run's ticket and starts
    nothing. None: the session picks one."""


class ResolveSession(msgspec.Struct, frozen=True, kw_only=True):
    """Find a session by id or key; create it if allowed; reset it if asked."""

    session_id: str | None = None
    session_key: str | None = None
    label: str | None = None
    create: bool = False
    reset: bool = False
    principal: str = "operator"
    reply: Reply = None


class ResetSession(msgspec.Struct, frozen=True, kw_only=True):
    """Later runs of the session no longer see earlier history; session grants are dropped."""

    session_id: str
    principal: str = "operator"
    reply: Reply = None


class CompactSession(msgspec.Struct, frozen=True, kw_only=True):
    """Condense the session's older runs into a summary now (docs/context.md, "Compaction").
    Answers :class:`CompactionOutcome`; refused (``Conflict``) while a run of the session is
    live or queued, or when no completed run is left to condense."""

    session_id: str
    principal: str = "operator"
    reply: Reply = None


class RestoreSession(msgspec.Struct, frozen=True, kw_only=True):
    """Return the session's context to checkpoint ``checkpoint_id`` (``session.restored``).
    Answers the :class:`~actors.sessions.state.SessionCheckpoint`; an unknown one is
    ``InvalidCommand("checkpoint")``, a live or queued run ``Conflict``."""

    session_id: str
    checkpoint_id: str
    principal: str = "operator"
    reply: Reply = None


class BranchSession(msgspec.Struct, frozen=True, kw_only=True):
    """Create a session whose history is this one's up to ``run_id`` (default: the last)."""

    session_id: str
    run_id: str | None = None
    session_key: str | None = None
    label: str | None = None
    principal: str = "operator"
    reply: Reply = None


class CancelRun(msgspec.Struct, frozen=True, kw_only=True):
    """Cancel a queued or live run."""

    run_id: str
    principal: str = "operator"
    reply: Reply = None


class StallRun(msgspec.Struct, frozen=True, kw_only=True):
    """The watchdog found the run without progress (``[watchdog] run_stall_s``, ``auto``
    mode): stop it as a cancel would, but it ends ``failed`` with reason ``stalled``, recorded
    as ``principal``'s act. Told to the run actor directly; a run that is ending ignores it."""

    run_id: str
    detail: str
    """What was measured (the message of ``run.failed``)."""
    principal: str = "watchdog"
    reply: Reply = None


class ResolveApproval(msgspec.Struct, frozen=True, kw_only=True):
    """A human decision on a pending approval."""

    approval_id: str
    decision: Verdict
    scope: GrantScope = "once"
    match: GrantMatch = "any"
    """For scope ``session``: which later calls the grant covers
    (:mod:`actors.approvals.grants`)."""
    prefix: str = ""
    principal: str = "operator"
    reason: str = ""
    reply: Reply = None
    attempts: int = 0
    """Directory-internal: redeliveries while the approval's actor is still starting."""


class SetSessionPosture(msgspec.Struct, frozen=True, kw_only=True):
    """Override a tool's posture for one session (``posture=None`` removes the override)."""

    session_id: str
    tool: str
    posture: Posture | None
    principal: str = "operator"
    reply: Reply = None


class RevokeGrant(msgspec.Struct, frozen=True, kw_only=True):
    """Revoke an ``always`` grant of ``tool`` to ``principal``. Answers the ``grant.revoked``
    it recorded; :class:`~actors.errors.GrantNotActive` when no such grant is in force,
    :class:`~actors.errors.InvalidCommand` naming a field no grant can have."""

    principal: str
    tool: str
    revoked_by: str = "operator"
    reply: Reply = None


class GetSessionState(msgspec.Struct, frozen=True, kw_only=True):
    """Ask a session for its folded state (introspection and tests)."""

    session_id: str
    reply: Reply = None


# --- internal ---------------------------------------------------------------------------------


class CreateSession(msgspec.Struct, frozen=True, kw_only=True):
    """Directory-internal: create a session (also the second half of a branch)."""

    session_key: str | None = None
    label: str | None = None
    parent_session_id: str | None = None
    branched_from_run_id: str | None = None
    history: tuple[str, ...] = ()
    principal: str = "operator"
    then: StartRun | None = None
    reply: Reply = None


class SessionStopped(msgspec.Struct, frozen=True):
    """Session -> directory: the session actor has stopped (passivated or failed)."""

    session_id: str
    urn: str = ""
    """The stopped actor's urn: the directory forgets the session only if it is the live one."""
    state: SessionState | None = None
    """The folded state of a passivated session (kept by the directory for the next wake-up);
    None after a failure (the next wake-up folds the stream again)."""
    unmade: bool = False
    """The session was never made (the journal refused its ``session.created``): the directory
    forgets its id and key."""


class SessionIdle(msgspec.Struct, frozen=True):
    """Session -> directory: nothing is live or queued here any more (passivate me)."""

    session_id: str
    urn: str


class Passivate(msgspec.Struct, frozen=True):
    """Directory -> session: stop if still idle."""


class PassivationTick(msgspec.Struct, frozen=True):
    """Timer -> directory: look for idle sessions."""


class RunFinished(msgspec.Struct, frozen=True, kw_only=True):
    """Run -> session: the run reached a terminal state."""

    run_id: str
    status: str


class GrantAdded(msgspec.Struct, frozen=True, kw_only=True):
    """Run -> session: a human allowed calls of a tool for the rest of the session."""

    grant: Grant


class SummaryWritten(msgspec.Struct, frozen=True, kw_only=True):
    """I/O loop -> session (through the directory): the model's summary for a planned
    compaction, or None when the model failed (``error`` says how; an extractive summary is
    recorded instead)."""

    plan: CompactionPlan
    summary: str | None
    error: str = ""


class ProviderItems(msgspec.Struct, frozen=True):
    """I/O loop -> run: the items of the provider stream for ``turn`` that arrived together
    (one message for what the stream yielded before the loop next turned, not one per item:
    each message is a thread hand-off); ``done``: the stream ended normally after them."""

    turn: int
    items: tuple[ProviderEvent, ...]
    done: bool = False


class ProviderFailed(msgspec.Struct, frozen=True):
    """I/O loop -> run: the provider call for ``turn`` failed; ``reason`` is the run's end
    reason (``provider_unavailable`` when no endpoint could answer)."""

    turn: int
    message: str
    reason: str = "provider_error"


class FlushTick(msgspec.Struct, frozen=True):
    """Timer -> run: buffered output may be older than the chunk age limit."""

    turn: int


class WallClockExpired(msgspec.Struct, frozen=True):
    """Timer -> run: the wall-clock budget is spent."""

    generation: int


class CancelGraceExpired(msgspec.Struct, frozen=True):
    """Timer -> run: stop waiting for the in-flight tool to acknowledge cancellation."""


class ToolAppended(msgspec.Struct, frozen=True):
    """Tool -> run: events the invocation just appended, as stored (the run folds them)."""

    records: tuple[Recorded, ...]


class Proceed(msgspec.Struct, frozen=True):
    """Run -> tool: the run is in progress again after the approval's decision; act on it
    (execute, or record the denial). Keeps the tape's order fixed: decision, ``run.resumed``,
    result."""


class ToSession(msgspec.Struct, frozen=True):
    """Run -> directory: deliver ``message`` to the session (waking it if needed)."""

    session_id: str
    message: Any


class AdoptSessions(msgspec.Struct, frozen=True, kw_only=True):
    """Node -> directory (a cluster node acquired ``shards``): learn the sessions in them, and
    their keys, as they are in the journal now; reply when done."""

    shards: frozenset[int]


class DropSessions(msgspec.Struct, frozen=True, kw_only=True):
    """Node -> directory (a cluster node lost shards): stop the live sessions ``session(id)``
    picks, forget their cached states; reply when done."""

    session: Callable[[str], bool]


class CancelTool(msgspec.Struct, frozen=True):
    """Run -> tool: the run was stopped; close a pending approval and the invocation."""

    reason: str


class BeginRun(msgspec.Struct, frozen=True):
    """Run actor -> itself: start (or resume) the run (keeps on_start short)."""


class ExecuteTool(msgspec.Struct, frozen=True):
    """Tool actor -> itself: run the pipeline (keeps on_start short)."""


class ApprovalTimedOut(msgspec.Struct, frozen=True):
    """Timer -> tool: the approval waited too long."""

    approval_id: str
