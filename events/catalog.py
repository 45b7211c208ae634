"""The event catalog: one frozen Struct per kind, decoded through one tagged union.

Every event class names its dotted kind as its msgspec ``tag`` (the payload carries it in the
``kind`` field) and its schema ``version`` as a class variable. Evolution rules (msgspec's):
new fields need defaults; a change that old payloads cannot satisfy bumps ``version`` and
registers an upcaster in :mod:`events.upcast`. Stored bytes are never rewritten.

Every string field is free text, redacted before hashing (:mod:`events.redaction.redact`), unless
it is typed as an identifier (``Id``, ``SessionKey``, ``Channel``, ``ToolName``, ``Principal`` from
:mod:`events.fields`), which is checked against a strict pattern instead and refused when it does
not fit or looks like a secret. Numbers such as token counts are never scanned, whatever their
names. ``redacted`` records how many values redaction replaced.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, ClassVar, Literal, get_args

import msgspec

from events.fields import (
    Channel,
    Id,
    Identifier,
    PlatformId,
    Principal,
    SessionKey,
    ToolName,
    VaultName,
)

RunTerminalReason = str
"""Termination reasons: final_answer, max_turns, max_tool_calls, wall_clock, cancelled,
approval_denied, provider_error, provider_unavailable, interrupted, internal_error, budget_exceeded
(a hard budget reached at a turn boundary: docs/usage.md), ..."""


class Event(msgspec.Struct, frozen=True, kw_only=True, tag_field="kind"):
    """Base of every event. Subclasses set ``tag=<kind>`` and may raise ``version``."""

    version: ClassVar[int] = 1

    redacted: int = 0
    """How many values redaction replaced in this event's free-form fields."""


# --- sessions (stream ``session/<session_id>``) -------------------------------------------


class SessionCreated(Event, frozen=True, kw_only=True, tag="session.created"):
    """A session exists. Version 2 renamed v1's ``key`` to ``session_key`` (see upcast)."""

    version: ClassVar[int] = 2

    session_id: Id
    session_key: SessionKey | None = None
    label: str | None = None
    parent_session_id: Id | None = None
    """Set on a branch: the session whose history this one starts from."""
    branched_from_run_id: Id | None = None
    """Set on a branch: the last run of the parent whose history is included."""
    history: tuple[Id, ...] = ()
    """Set on a branch: the run ids (the parent's visible history up to the branch point) that
    this session's runs see as prior turns."""


class SessionReset(Event, frozen=True, kw_only=True, tag="session.reset"):
    """Later runs no longer see earlier history; session-scoped approval grants are dropped."""

    session_id: Id


GrantMatch = Literal["any", "exact", "prefix"]
"""Which calls of the tool a ``session`` grant covers: any arguments, exactly the approved
arguments (``arguments_digest``), or arguments whose subject starts with ``prefix`` (an argv
prefix for ``shell.run``, a path prefix for ``fs.*``, a method and URL prefix for
``http.fetch``): :mod:`actors.approvals.grants`."""
GRANT_MATCHES: tuple[GrantMatch, ...] = get_args(GrantMatch)
GrantScope = Literal["once", "session", "always"]
"""How long an approval's allow stands: this call only, the session (until it is reset), or
``always`` (the principal and the tool, until revoked)."""
GRANT_SCOPES: tuple[GrantScope, ...] = get_args(GrantScope)
Verdict = Literal["allow", "deny"]
"""A decision: a human's (or the node's) on an approval or a pairing request, Cedar's on an
API request."""
Posture = Literal["always_allow", "ask_each_time", "disabled"]
"""A tool's posture (``tools.spec.Posture``: the tools package cannot import this one)."""


class SessionGrantAdded(Event, frozen=True, kw_only=True, tag="session.grant_added"):
    """A human allowed ``tool`` with scope ``session``: later calls in this session that the
    grant covers (``match``) do not ask again until the session resets."""

    session_id: Id
    tool: ToolName
    approval_id: Id
    match: GrantMatch = "any"
    prefix: str = ""
    arguments_digest: bytes = b""


class SessionPostureSet(Event, frozen=True, kw_only=True, tag="session.posture_set"):
    """An operator overrode a tool's posture for this session only (``None`` clears it)."""

    session_id: Id
    tool: ToolName
    posture: Posture | None


CompactionMethod = Literal["extractive", "model"]
"""How a compaction's summary was written: from the covered runs' own words (each message and
the start of its answer), or by the session's model (docs/context.md, "Compaction")."""
CompactionTrigger = Literal["auto", "request"]
"""What made a compaction: the history passed ``[context] compact_at`` after a run, or a
request."""


class SessionCompacted(Event, frozen=True, kw_only=True, tag="session.compacted"):
    """Older runs of the session were condensed into ``summary``, which stands in for them in
    every later run's context (the assembler leaves the ``covers`` runs out). The compaction is
    also a checkpoint (its id is ``compaction_id``) that ``session.restored`` can return to.

    ``covers`` is cumulative: a later compaction's summary includes the previous summary and
    covers its runs too. ``tokens_before`` / ``tokens_after``: the estimated tokens of the
    session's history (summary plus the completed runs it does not cover) before and after."""

    session_id: Id
    compaction_id: Id
    summary: str
    covers: tuple[Id, ...]
    """The runs the summary condenses, oldest first."""
    method: CompactionMethod = "extractive"
    tokens_before: int = 0
    tokens_after: int = 0
    trigger: CompactionTrigger = "request"
    """``auto``: the history passed ``[context] compact_at`` after a run; ``request``: asked
    for (``reel sessions compact``, ``POST /v1/sessions/{id}/compact``)."""


class SessionRestored(Event, frozen=True, kw_only=True, tag="session.restored"):
    """The session's context went back to checkpoint ``checkpoint_id``: the summary in force
    and the history are that compaction's again. Runs made since stay in the journal (and in
    ``session.runs``); later runs no longer see them."""

    session_id: Id
    checkpoint_id: Id


class GrantRevoked(Event, frozen=True, kw_only=True, tag="grant.revoked"):
    """An ``always`` grant (principal + tool) was revoked; later calls ask again.

    Stream ``grants``, written by the session directory (or ``reel approvals revoke`` on a
    stopped node)."""

    principal: Principal
    tool: ToolName


# --- runs (stream ``run/<run_id>``; ``run.accepted`` is on the session stream) ----------------


class RunAccepted(Event, frozen=True, kw_only=True, tag="run.accepted"):
    """A message was accepted for a session; the run may wait behind earlier runs."""

    run_id: Id
    session_id: Id
    text: str
    channel: Channel | None = None


class RunStarted(Event, frozen=True, kw_only=True, tag="run.started"):
    """The run left ``accepted`` for ``in_progress``, with the budgets it runs under."""

    run_id: Id
    max_turns: int
    max_tool_calls: int
    wall_clock_s: float
    provider: str = ""
    model: str | None = None


class RunContextAssembled(Event, frozen=True, kw_only=True, tag="run.context_assembled"):
    """What went into the run's model input besides its message, recorded once, before its
    first turn (docs/context.md). The run's later turns and a restarted run build their input
    from this event and the tape, never from a second search.

    ``memory``: one object per injected item: ``item_id``, ``text`` (as injected), and the
    scores ``lexical``, ``vector``, ``recency``, ``final`` (basis points, 0-10000).
    ``references``: one object per ``@kind:target`` in the message, in order: ``kind``
    (``file``, ``folder``, ``diff``, ``url``, ``memory``, ``run``), ``target``, ``outcome``
    (``included``, ``denied``, ``failed``, ``not_found``), ``note`` (why, when not included),
    ``call_id`` (the governed tool call that read a file, folder, diff or URL), and ``text`` (a
    memory item's or a run's content, as included)."""

    run_id: Id
    compaction_id: Id | None = None
    prior_runs: tuple[Id, ...] = ()
    """The earlier runs whose turns are included, oldest first."""
    dropped_runs: int = 0
    """Earlier runs left out because the token budget was spent (not covered by compaction)."""
    memory: tuple[dict[str, Any], ...] = ()
    references: tuple[dict[str, Any], ...] = ()
    estimated_input_tokens: int = 0
    budget_tokens: int = 0
    learned: tuple[dict[str, Any], ...] = ()
    """Applied learnings offered to this run: ``candidate_id``, ``kind`` (``preference`` of
    the run's principal, or ``procedure`` hint for a similar request) and ``text``."""


class RunOutput(Event, frozen=True, kw_only=True, tag="run.output"):
    """A coalesced chunk of model output (at most ~16 words or 50 ms)."""

    run_id: Id
    turn: int
    text: str


class RunTurnCompleted(Event, frozen=True, kw_only=True, tag="run.turn_completed"):
    """One provider call finished; token counts are the provider's usage for that call.

    ``cached_tokens`` is the part of ``prompt_tokens`` served from the provider's prompt cache;
    ``model`` and ``endpoint`` name the model and the configured endpoint that answered ("" in
    journals written before they were recorded, or when the provider does not say).
    ``calls`` records the tool calls the model proposed (``{"id", "name", "arguments"}``, the
    arguments as the model's JSON text, redacted), so a run can be resumed after a restart."""

    run_id: Id
    turn: int
    prompt_tokens: int
    completion_tokens: int
    tool_calls: int
    finish_reason: str
    calls: tuple[dict[str, str], ...] = ()
    cached_tokens: int = 0
    model: str = ""
    endpoint: str = ""


class RunAwaitingApproval(Event, frozen=True, kw_only=True, tag="run.awaiting_approval"):
    """The run waits for a human decision on ``approval_id``."""

    run_id: Id
    approval_id: Id


class RunResumed(Event, frozen=True, kw_only=True, tag="run.resumed"):
    """The approval the run waited for was resolved; the run is in progress again."""

    run_id: Id
    approval_id: Id


class RunCancelRequested(Event, frozen=True, kw_only=True, tag="run.cancel_requested"):
    """A cancel was accepted for a run that cannot end at once (a tool call is in flight or
    waits for its approval). Journaled before the cancel is acknowledged, so a restart never
    forgets it: a run that has this and no terminal event is failed ``interrupted``, never
    resumed."""

    run_id: Id
    requested_by: Principal


class RunCompleted(Event, frozen=True, kw_only=True, tag="run.completed"):
    """Terminal: the model gave a final answer."""

    run_id: Id
    answer: str
    reason: RunTerminalReason = "final_answer"
    turns: int = 0
    tool_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0


class RunFailed(Event, frozen=True, kw_only=True, tag="run.failed"):
    """Terminal: a budget, a provider error, a denial or a crash stopped the run."""

    run_id: Id
    reason: RunTerminalReason
    message: str = ""
    turns: int = 0
    tool_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0


class RunCancelled(Event, frozen=True, kw_only=True, tag="run.cancelled"):
    """Terminal: cancelled from outside (a client, an operator, the node draining)."""

    run_id: Id
    reason: RunTerminalReason = "cancelled"
    requested_by: Principal = ""
    turns: int = 0
    tool_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0


# --- tool invocations (stream ``tool/<invocation_id>``) ------------------------------------


class ToolProposed(Event, frozen=True, kw_only=True, tag="tool.proposed"):
    """The model asked for a tool call; ``arguments`` is the decoded JSON or the raw text."""

    invocation_id: Id
    run_id: Id
    session_id: Id
    call_id: str
    tool: ToolName
    arguments: Any


ToolOutcome = Literal["allow", "deny", "approval_required"]
"""What posture and policy decided for a call (``policies.decision.Outcome``: the policies
package cannot import this one)."""


class ToolDecided(Event, frozen=True, kw_only=True, tag="tool.decided"):
    """The outcome of posture and policy for one call, naming the policies that decided."""

    invocation_id: Id
    run_id: Id
    tool: ToolName
    outcome: ToolOutcome
    reason: str
    policy_ids: tuple[str, ...] = ()
    posture: str = ""
    grant: str | None = None
    """Set when a cached approval grant (scope session/always) allowed the call."""
    vault: tuple[VaultName, ...] = ()
    """The vault secrets the call names by handle, each decided by ``vault.use`` with the call
    (their policies are among ``policy_ids``): names only, never a value."""


class ApprovalRequested(Event, frozen=True, kw_only=True, tag="tool.approval_requested"):
    """A sensitive call waits for a human; ``arguments`` are stored as redacted."""

    approval_id: Id
    invocation_id: Id
    run_id: Id
    session_id: Id
    tool: ToolName
    arguments: Any
    risk: str
    reason: str
    scope_options: tuple[str, ...] = ("once", "session", "always")
    expires_at_ms: int = 0


class ApprovalResolved(Event, frozen=True, kw_only=True, tag="tool.approval_resolved"):
    """A decision on an approval: by a human, or ``timeout`` / ``interrupted`` by the node."""

    approval_id: Id
    invocation_id: Id
    run_id: Id
    decision: Verdict
    scope: GrantScope = "once"
    decided_by: Principal = ""
    reason: str = ""
    tool: ToolName = ""
    grant_principal: Principal = ""
    """Whose calls a ``session``/``always`` grant covers: the principal the run acts for."""
    waited_ms: int = 0
    match: GrantMatch = "any"
    """For scope ``session``: which later calls the grant covers (see :data:`GrantMatch`)."""
    prefix: str = ""
    """For ``match="prefix"``: the prefix the approver typed."""
    arguments_digest: bytes = b""
    """For ``match="exact"``: SHA-256 of the approved call's validated arguments (canonical
    JSON), so the grant covers that call only without storing its arguments again."""


class ToolCompleted(Event, frozen=True, kw_only=True, tag="tool.completed"):
    """The call's result (or why it did not run) as fed back to the model."""

    invocation_id: Id
    run_id: Id
    tool: ToolName
    ok: bool
    output: str = ""
    error: str | None = None
    error_kind: str | None = None
    truncated: bool = False
    duration_ms: int = 0


# --- workspace checkpoints (stream ``workspace/<checkpoint_id>``) -------------------------


class WorkspaceCheckpointed(Event, frozen=True, kw_only=True, tag="workspace.checkpointed"):
    """A mutating call (or a restore) changed workspace files: one object per file, sorted by
    path, with ``path``, ``before`` and ``after``, the hex SHA-256 of its content (``null``:
    absent). The contents are blobs in ``<data>/checkpoints`` (tools/checkpoints.py).

    Set for a tool call: ``tool``, ``invocation_id``, ``run_id``, ``session_id`` (the envelope's
    principal is the run's). Set for a restore: ``restored`` (the checkpoint gone back to) and
    ``restored_before`` (to the state before it rather than after); the envelope's principal
    is who asked. A call that changed many files is recorded as several of these events with
    the same ``checkpoint_id`` in one append (each a part of ``files``, in path order)."""

    checkpoint_id: Id
    files: tuple[dict[str, Any], ...]
    complete: bool = True
    """False: the tree walk stopped at ``checkpoint_scan_max_files``; other changes were not
    recorded."""
    tool: ToolName | None = None
    invocation_id: Id | None = None
    run_id: Id | None = None
    session_id: Id | None = None
    restored: Id | None = None
    restored_before: bool = False


class WorkspaceBlobsPruned(Event, frozen=True, kw_only=True, tag="workspace.blobs_pruned"):
    """Retention (``checkpoint_blob_max_bytes``) deleted these blobs (hex SHA-256) while
    checkpoint ``checkpoint_id`` was recorded: versions only they held can no longer be
    restored."""

    checkpoint_id: Id
    blobs: tuple[str, ...]
    freed_bytes: int


# --- memory (stream ``memory/<item_id>``) ------------------------------------------------

MEMORY_TEXT_MAX_CHARS = 8_000
"""The cap on a memory item's ``text``, in characters. Writers (the ``memory.write`` tool, the
CLI, the HTTP API) refuse longer text naming this cap; the event itself does not enforce it,
because redaction may lengthen stored text and a stored event must always decode."""
MEMORY_TAGS_MAX = 16
"""The cap on how many tags one memory item carries (writers refuse more)."""

MemorySource = Literal["user_message", "tool_result", "summary", "manual", "learned"]
"""Where a memory item came from."""
MemoryScope = Literal["principal", "session", "global"]
"""Who sees a memory item: runs acting for ``principal``, runs of ``session_id``, or every run."""
MEMORY_SCOPES: tuple[MemoryScope, ...] = get_args(MemoryScope)


class MemoryItemWritten(Event, frozen=True, kw_only=True, tag="memory.item_written"):
    """A durable fact to remember. Writing an ``item_id`` that exists replaces the item (text,
    tags, scope, expiry) and keeps its creation time; writing a deleted one brings it back.

    ``principal`` is whose item it is for scope ``principal`` (``None``: the writer, the
    envelope's principal); ``session_id`` is the session of a scope ``session`` item.
    ``text`` and ``tags`` are free text, redacted like every other event's, so a secret in them
    is never stored nor indexed."""

    item_id: Id
    text: str
    source: MemorySource = "manual"
    tags: tuple[str, ...] = ()
    scope: MemoryScope = "principal"
    principal: Principal | None = None
    session_id: Id | None = None
    expires_at_ms: int | None = None
    """After this time (ms since the epoch) the item is never returned; ``None``: never."""


class MemoryItemDeleted(Event, frozen=True, kw_only=True, tag="memory.item_deleted"):
    """The item is forgotten by every view (its written event stays in the journal)."""

    item_id: Id
    reason: str = ""


# --- incidents (stream ``incident/<incident_id>``, written by the watchdog only) -------------

IncidentDomain = Literal["run", "task", "approval", "projector", "journal", "schedule", "budget"]
"""What an incident is about: a run without progress, a task whose lease lapsed, an approval
pending past its time-out, the views lagging the journal, the journal failing verification, a
schedule the node stopped (its principal holds no live token), a principal or session past a
budget's soft limit (docs/usage.md)."""
INCIDENT_DOMAINS: tuple[IncidentDomain, ...] = (
    "run",
    "task",
    "approval",
    "projector",
    "journal",
    "schedule",
    "budget",
)
"""Every domain, in the order surfaces list them (``reel_incidents_open`` has one per domain)."""
IncidentAction = Literal["fail_run", "expire_approval", "reclaim_task"]
"""What the watchdog does about an incident in ``auto`` mode (the act itself is recorded by
the stream that owns the subject: ``run.failed`` reason ``stalled``, ``tool.approval_resolved``
reason ``expired``, ...)."""


class IncidentOpened(Event, frozen=True, kw_only=True, tag="incident.opened"):
    """The watchdog found something wrong with ``subject`` (the run, task or approval id, or
    ``views`` / ``journal``). At most one incident per (domain, subject) is open at a time.

    ``evidence`` is what was measured against which limit: ``measure``, ``value``, ``limit``,
    ``unit``, and where it applies ``since_ms`` (when the condition began) and ``detail``
    (free text, redacted like every other). ``action`` is what ``auto`` mode does about it;
    ``None`` in ``observe`` mode (record only)."""

    incident_id: Id
    domain: IncidentDomain
    subject: Id
    evidence: dict[str, Any]
    action: IncidentAction | None = None


IncidentHow = Literal["cleared", "acted"]
"""How an incident ended: its condition went away by itself, or after the watchdog acted."""


class IncidentResolved(Event, frozen=True, kw_only=True, tag="incident.resolved"):
    """The incident is over: its condition ``cleared`` by itself, or the watchdog ``acted``
    on it and the condition is gone."""

    incident_id: Id
    how: IncidentHow


# --- usage budgets (``budget.refused`` is on the session stream it refused a run in) -------------

BudgetScope = Literal["principal", "role", "session"]
"""Whom a budget (``[budgets.<name>]``, docs/usage.md) limits: one principal, each principal
holding a role, or one session."""
BudgetMeasure = Literal["tokens", "cost", "runs"]
"""What a budget counts: input plus output tokens, their cost by ``[usage.prices]``, or runs
accepted."""
BudgetPeriod = Literal["hour", "day", "month"]
"""The UTC calendar period a budget counts over (tokens and cost: day or month; runs: hour)."""


class BudgetRefused(Event, frozen=True, kw_only=True, tag="budget.refused"):
    """A message was refused before any run was accepted for it: the hard limit of ``budget``
    (on ``scope`` ``subject``: a principal, a role, a session) is reached by ``counted`` (the
    principal or session whose use was measured) in the period ``period_key`` (``2026-11-27``,
    ``2026-11``, ``2026-11-27T16``). Recorded by the principal that sent the message; a run that
    crosses a hard limit mid-way fails ``budget_exceeded`` instead."""

    session_id: Id
    budget: str
    scope: BudgetScope
    subject: str
    counted: str
    measure: BudgetMeasure
    period_key: str
    used: float
    limit: float


# --- tasks (stream ``task/<task_id>``; docs/tasks.md) ------------------------------------------

TASK_KIND = Identifier(
    "task kind", re.compile(r"(?=.{1,64}\Z)[a-z][a-z0-9_]*(?:\.[a-z][a-z0-9_]*)*")
)
"""What a task kind looks like (``noop``, ``post_run_reflection``): it names the handler that
runs the task, and is stored in clear."""
TaskKind = Annotated[str, TASK_KIND]

TaskErrorKind = Literal["error", "unknown_kind", "timeout", "invalid_result", "lapsed"]
"""Why an attempt failed: the handler raised (``error``), no handler is registered for the
kind, the handler overran its deadline, its result could not be stored, or the claim's lease
lapsed on the last attempt (the worker or its node stopped)."""


class TaskEnqueued(Event, frozen=True, kw_only=True, tag="task.enqueued"):
    """Background work: a handler of ``task_kind`` runs with ``payload`` on one of the node's task
    workers, not before ``not_before_ms``, never at or after ``expires_at_ms`` (``None``: no
    expiry), at most ``max_attempts`` times. After failed attempt ``n`` the next waits
    ``min(backoff_base_ms * 2 ** (n - 1), backoff_max_ms)``.

    A task's stream has several writers (the enqueuer, the worker that claims it, a canceller);
    each appends at the seq its own fold of the stream expects, so of two racing appends the
    journal keeps one and refuses the other. ``payload`` is free text (redacted): a handler
    receives it as stored. ``dedupe_key``: a second enqueue with the same key is the first task
    (the append's idempotency key)."""

    task_id: Id
    task_kind: TaskKind
    """Which handler runs it (``kind`` is the event's own tag, so the field is named apart)."""
    payload: Any = None
    not_before_ms: int = 0
    expires_at_ms: int | None = None
    max_attempts: int = 3
    backoff_base_ms: int = 1_000
    backoff_max_ms: int = 300_000
    dedupe_key: Id | None = None


class TaskClaimed(Event, frozen=True, kw_only=True, tag="task.claimed"):
    """``worker`` (``<node incarnation>.<n>``) runs attempt ``attempt`` (from 1) and holds the
    task until ``lease_until_ms``, which its heartbeats push on. A claim of a task already
    claimed is a reclaim: the previous holder's lease had lapsed."""

    task_id: Id
    attempt: int
    worker: Id
    lease_until_ms: int


class TaskHeartbeat(Event, frozen=True, kw_only=True, tag="task.heartbeat"):
    """The worker running ``attempt`` is alive: its lease now runs until ``lease_until_ms``."""

    task_id: Id
    attempt: int
    lease_until_ms: int


class TaskSucceeded(Event, frozen=True, kw_only=True, tag="task.succeeded"):
    """Terminal: attempt ``attempt`` returned ``result`` (JSON, redacted). At most one per task:
    a second would be appended at a seq the stream has passed, and is refused."""

    task_id: Id
    attempt: int
    result: Any = None
    duration_ms: int = 0


class TaskFailed(Event, frozen=True, kw_only=True, tag="task.failed"):
    """Attempt ``attempt`` failed with ``error``. ``retry_at_ms`` is when the next attempt may
    start; ``None`` means final (the last attempt, or a failure retrying cannot help)."""

    task_id: Id
    attempt: int
    error: str
    error_kind: TaskErrorKind = "error"
    retry_at_ms: int | None = None
    duration_ms: int = 0


class TaskExpired(Event, frozen=True, kw_only=True, tag="task.expired"):
    """Terminal: ``expires_at_ms`` passed before the task could start (again); it never runs.
    ``attempts``: how many attempts had started before."""

    task_id: Id
    expires_at_ms: int
    attempts: int = 0


class TaskCancelled(Event, frozen=True, kw_only=True, tag="task.cancelled"):
    """Terminal: ``cancelled_by`` cancelled the task. ``attempt`` is the attempt it interrupted
    (its handler's cancel flag was set), 0 when none was running."""

    task_id: Id
    cancelled_by: Principal
    reason: str = ""
    attempt: int = 0


# --- learning (stream ``learning/<candidate_id>``; docs/learning.md) ---------------------------

LearningKind = Literal["fact", "preference", "procedure"]
"""What a learning candidate is: a durable ``fact`` (applied as a memory item of source
``learned``), a ``preference`` of its principal (offered to that principal's later runs), or a
``procedure`` (a tool sequence offered as a hint when a similar request arrives)."""
LEARNING_TEXT_MAX_CHARS = 500
"""The cap on a candidate's ``text``, in characters (extractors cut longer text)."""
LEARNING_KINDS: tuple[LearningKind, ...] = get_args(LearningKind)
CandidateStatus = Literal["pending", "applied", "rejected", "rolled_back"]
"""A candidate's status as its stream says (its fold, :mod:`actors.learning.state`, and the
learning view hold the same word)."""
CANDIDATE_STATUSES: tuple[CandidateStatus, ...] = get_args(CandidateStatus)
Extractor = Literal["rules", "model"]
"""What found a candidate: reflection's rules, or the node's model."""


class LearningCandidateProposed(
    Event, frozen=True, kw_only=True, tag="learning.candidate_proposed"
):
    """Reflection on a run found something worth learning about ``principal``. The stream's
    id is derived from ``(principal, kind, dedupe_key)``, so the same thing found again lands
    on the same stream (``learning.evidence_added``), never on a second candidate.

    ``runs`` are the runs that show it, and ``positions[i]`` the journal positions in
    ``runs[i]``'s tape that do (the message that said it; a procedure's tool results).
    ``confidence_bps`` is 0-10000. ``text`` and ``dedupe_key`` are free text (redacted)."""

    candidate_id: Id
    learning_kind: LearningKind
    """``kind`` is the event's own tag, so the field is named apart."""
    text: str
    principal: Principal
    """Whom it concerns: whose runs it was found in, and whose runs it is offered to."""
    confidence_bps: int
    dedupe_key: str
    runs: tuple[Id, ...]
    positions: tuple[tuple[int, ...], ...] = ()
    trigger: str = ""
    """For a procedure: the content words of the request it was first seen for, which a later
    request is compared with (docs/learning.md, "similar")."""
    tools: tuple[ToolName, ...] = ()
    """For a procedure: the tool sequence, in order."""
    extractor: Extractor = "rules"


class LearningEvidenceAdded(Event, frozen=True, kw_only=True, tag="learning.evidence_added"):
    """A duplicate was found in more runs: their evidence is merged into the candidate, whose
    confidence is now ``confidence_bps``."""

    candidate_id: Id
    runs: tuple[Id, ...]
    positions: tuple[tuple[int, ...], ...] = ()
    confidence_bps: int


class LearningCandidateApplied(Event, frozen=True, kw_only=True, tag="learning.candidate_applied"):
    """The candidate takes effect: ``by`` is ``reflection`` when its confidence reached its
    kind's threshold, else the reviewer who accepted it. A fact produced the memory item
    ``memory_item_id``; a preference or procedure is offered to later runs from now on."""

    candidate_id: Id
    by: Principal
    memory_item_id: Id | None = None
    reason: str = ""


class LearningCandidateRejected(
    Event, frozen=True, kw_only=True, tag="learning.candidate_rejected"
):
    """A reviewer refused a waiting candidate; it is never applied unless accepted later."""

    candidate_id: Id
    by: Principal
    reason: str = ""


class LearningCandidateRolledBack(
    Event, frozen=True, kw_only=True, tag="learning.candidate_rolled_back"
):
    """An applied candidate is withdrawn: the memory item it produced is deleted
    (``memory_item_id``, by a ``memory.item_deleted`` appended before this event), a preference
    or procedure is no longer offered."""

    candidate_id: Id
    by: Principal
    reason: str = ""
    memory_item_id: Id | None = None


# --- channels (stream ``channel/<name>``, written by that channel's actor only) -----------------
#
# A chat platform's messages enter through a connector and the channel router
# (transports/channels, docs/channels.md). Every decision is one event with its reason; the
# envelope's principal is the sender (``channel:<channel>:<sender>``), or for a pairing code
# the operator who minted it. Platform ids (conversation, message and thread ids) are
# ``PlatformId``s, checked but never redacted (events/fields.py says why); display names and
# reasons are free text, redacted like any other.

ChannelRoute = Literal["run", "coalesced", "command", "pairing"]
"""What an accepted message became: a run's input (``run``), part of a merged run input
(``coalesced``), a ``!reel`` command, or a pairing request."""
ChannelRefusal = Literal[
    "channel_disabled",
    "sender_denied",
    "rate_limited",
    "not_allowed",
    "dm_denied",
    "group_denied",
    "pairing_required",
    "pairing_code_invalid",
    "mention_required",
    "broadcast_denied",
]
"""Why the router refused a message, in the router's order (docs/channels.md)."""


class ChannelMessageRouted(Event, frozen=True, kw_only=True, tag="channel.message_routed"):
    """The router accepted a message. Appended with the idempotency key of the platform's
    message id, so a second delivery of the same message writes nothing and starts nothing.

    ``reply``: whether the run's answer goes back into the conversation (the broadcast policy;
    direct conversations are always answered)."""

    channel: Channel
    message_id: PlatformId
    conversation: PlatformId
    thread: PlatformId | None = None
    principal: Principal
    """The sender, as the run's principal."""
    session_key: SessionKey
    is_direct: bool
    mentioned: bool = False
    route: ChannelRoute = "run"
    reply: bool = True
    attachments: int = 0
    input: str = ""
    """What this message adds to a run's input (its text, attachments named on their own
    lines), for routes ``run`` and ``coalesced``: kept so that a message accepted but not yet
    handed to a run when the node stopped (held for coalescing, or in flight) starts its run
    at the next start. Empty for commands, pairing requests and events recorded before
    recovery existed (those are not recovered)."""


class ChannelMessageRefused(Event, frozen=True, kw_only=True, tag="channel.message_refused"):
    """The router refused a message (``reason``); ``detail`` says why in words.
    ``suppressed``: refusals of this sender for the same reason that were not recorded one by
    one since the last one that was (a flood is one event per second, not one per message)."""

    channel: Channel
    message_id: PlatformId
    conversation: PlatformId
    principal: Principal
    reason: ChannelRefusal
    detail: str = ""
    suppressed: int = 0


class ChannelPairCodeMinted(Event, frozen=True, kw_only=True, tag="channel.pair_code_minted"):
    """An operator minted a single-use pairing code. The code itself is never stored:
    ``digest`` is scrypt(code, ``salt``) with the parameters in ``kdf``, slow enough that the
    40-bit code cannot be searched for from the journal before it expires."""

    channel: Channel
    code_id: Id
    salt: bytes
    digest: bytes
    kdf: str
    expires_at_ms: int


class ChannelPairingRequested(Event, frozen=True, kw_only=True, tag="channel.pairing_requested"):
    """A sender sent a valid code (``code_id``, now used up) in a direct message: a pending
    approval (subject ``pairing``) that the approvals view, API, CLI and console show and
    ``approval.resolve`` decides. It waits until ``expires_at_ms``, then is denied."""

    channel: Channel
    approval_id: Id
    code_id: Id
    principal: Principal
    """The sender asking to be paired."""
    conversation: PlatformId
    display_name: str = ""
    expires_at_ms: int


class ChannelPairingResolved(Event, frozen=True, kw_only=True, tag="channel.pairing_resolved"):
    """A decision on a pairing request: by a human (``decided_by``), or by ``node`` when it
    expired. An allowed sender passes the allow list and the direct-message policy of this
    channel until ``allowed_until_ms``."""

    channel: Channel
    approval_id: Id
    principal: Principal
    decision: Verdict
    decided_by: Principal
    reason: str = ""
    allowed_until_ms: int = 0
    waited_ms: int = 0


ChannelCommandName = Literal["status", "stop", "reset", "approve", "deny", "help"]
"""The ``!reel`` commands a channel's senders may send (docs/channels.md)."""
CommandOutcome = Literal["done", "denied", "failed"]


class ChannelCommandHandled(Event, frozen=True, kw_only=True, tag="channel.command_handled"):
    """A ``!reel`` command from a sender, and what came of it (the Cedar decision itself is
    an ``access.decided`` event, naming the policies)."""

    channel: Channel
    principal: Principal
    command: ChannelCommandName
    target: Id = ""
    """The run, session or approval the command acted on (empty when none)."""
    outcome: CommandOutcome
    detail: str = ""


class ChannelRunRequested(Event, frozen=True, kw_only=True, tag="channel.run_requested"):
    """Accepted messages (``message_ids`` in order: one, or several coalesced) are being handed
    to the session ``session_key`` as the run ``run_id``. Recorded before the run is asked
    for, so that a node that stops before ``channel.run_started`` (or
    ``channel.run_not_started``) asks again at its next start with the same run id; a session
    that already has that run starts nothing twice."""

    channel: Channel
    run_id: Id
    session_key: SessionKey
    principal: Principal
    conversation: PlatformId
    thread: PlatformId | None = None
    message_ids: tuple[PlatformId, ...]
    reply: bool = True
    label: str = ""
    """The session's label, should the run create it."""


class ChannelRunStarted(Event, frozen=True, kw_only=True, tag="channel.run_started"):
    """An accepted message (or several, coalesced: ``in_reply_to``) started or continued
    ``run_id``. When ``reply``, its answer is to go back into ``conversation``: after a restart
    the channel still answers runs that were in flight (those without a
    ``channel.reply_sent``)."""

    channel: Channel
    run_id: Id
    session_id: Id
    conversation: PlatformId
    thread: PlatformId | None = None
    in_reply_to: tuple[PlatformId, ...]
    reply: bool = True


class ChannelRunNotStarted(Event, frozen=True, kw_only=True, tag="channel.run_not_started"):
    """The node refused the run a ``channel.run_requested`` asked for (``error`` says why, in
    words): its messages get no run and are not asked for again. A node that was shutting down
    records nothing; it asks again at its next start."""

    channel: Channel
    run_id: Id
    error: str


class ChannelReplySent(Event, frozen=True, kw_only=True, tag="channel.reply_sent"):
    """The run's answer went back through the connector (``ok``), or could not (``error``).
    Links the run to the platform messages it answers."""

    channel: Channel
    run_id: Id
    conversation: PlatformId
    in_reply_to: tuple[PlatformId, ...]
    parts: int = 0
    ok: bool = True
    error: str = ""


class ChannelCursorSaved(Event, frozen=True, kw_only=True, tag="channel.cursor_saved"):
    """How far the connector has read its platform (a Matrix sync token): every message
    before ``cursor`` was handed to the router. A restarted node resumes from the latest one,
    so what was said while it was stopped is answered. Saved after a sync that held messages
    and at a clean stop, never on an empty poll. A platform id (checked, never redacted): a
    sync token may look like a secret but grants nothing without the bot's access token."""

    channel: Channel
    cursor: PlatformId


# --- API tokens (stream ``token/<token_id>``) ---------------------------------------------


class TokenCreated(Event, frozen=True, kw_only=True, tag="token.created"):
    """A bearer token for ``principal`` with ``roles`` exists. The token itself is never
    stored: ``digest`` is its SHA-256 (the token has 256 random bits, so the digest does not
    lead back to it)."""

    token_id: Id
    principal: Principal
    roles: tuple[str, ...]
    digest: bytes
    expires_at_ms: int | None = None
    note: str = ""


class TokenRevoked(Event, frozen=True, kw_only=True, tag="token.revoked"):
    """The token stops working (within a second on a running node)."""

    token_id: Id
    reason: str = ""


class TokenUsed(Event, frozen=True, kw_only=True, tag="token.used"):
    """The token authenticated a request (stream ``token-use/<token_id>``, by the token's
    principal). Recorded at most once an hour per token, so ``reel tokens list`` can say when
    each was last used, to the hour, without an event per request."""

    token_id: Id


# --- the vault (stream ``vault/<name>``): names and versions, never a value ----------------


class VaultSecretSet(Event, frozen=True, kw_only=True, tag="vault.secret_set"):
    """A secret named ``name`` exists (again, after a delete) at ``revision``; its value is
    encrypted in the data dir (docs/vault.md), never on the journal."""

    name: VaultName
    revision: int


class VaultSecretRotated(Event, frozen=True, kw_only=True, tag="vault.secret_rotated"):
    """``name`` has a new value, ``revision``: the next call that names it uses that value."""

    name: VaultName
    revision: int


class VaultSecretDeleted(Event, frozen=True, kw_only=True, tag="vault.secret_deleted"):
    """``name`` (last at ``revision``) is gone: its values are erased, a handle naming it fails."""

    name: VaultName
    revision: int


# --- schedules (stream ``schedule/<schedule_id>``; docs/schedules.md) ---------------------------

SCHEDULE_NAME = Identifier("schedule name", re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,63}"))
"""What a schedule is called (``daily-report``): unique among the schedules that exist, stored
in clear."""
ScheduleName = Annotated[str, SCHEDULE_NAME]
CatchUp = Literal["skip", "one", "all"]
"""What a schedule does about due times missed while its node was down: none of them, the
latest one, or each (docs/schedules.md)."""
CATCH_UPS: tuple[CatchUp, ...] = get_args(CatchUp)
Overlap = Literal["skip", "queue"]
"""What a due time does while the schedule's previous run is still live: nothing (recorded as
skipped), or start a run that waits behind it in the session."""
OVERLAPS: tuple[Overlap, ...] = get_args(Overlap)
FireTrigger = Literal["due", "catch_up", "manual"]
"""Why a schedule fired: a due time on a running node, a missed one caught up at start, or
``run-now``."""
SkipReason = Literal["catch_up", "overlap"]
"""Why due times passed without a run: missed while the node was down (and ``catch_up`` left
them), or the previous run was still live (``overlap = "skip"``)."""
StopReason = Literal["principal_revoked"]
"""Why the node stopped a schedule: the principal it runs as holds no live token any more."""


class ScheduleCreated(Event, frozen=True, kw_only=True, tag="schedule.created"):
    """A schedule exists: at each due time of ``cron`` (five fields, read in ``tz``) or every
    ``every_ms`` from ``anchor_ms``, a run with ``text`` starts in the session ``session_key``
    (created if new) as ``runs_as``, with that principal's roles. Exactly one of ``cron`` and
    ``every_ms`` is set."""

    schedule_id: Id
    name: ScheduleName
    cron: str = ""
    every_ms: int = 0
    tz: str = "UTC"
    anchor_ms: int
    """Due times are after this instant (the creation time): the first is the first one past it."""
    session_key: SessionKey
    text: str
    runs_as: Principal
    catch_up: CatchUp = "one"
    overlap: Overlap = "skip"


class SchedulePaused(Event, frozen=True, kw_only=True, tag="schedule.paused"):
    """The schedule fires nothing until resumed; due times while paused are passed over."""

    schedule_id: Id


class ScheduleResumed(Event, frozen=True, kw_only=True, tag="schedule.resumed"):
    """The schedule fires again from its next due time after ``after_ms`` (the resume's time):
    due times while it was paused are not caught up."""

    schedule_id: Id
    after_ms: int


class ScheduleDeleted(Event, frozen=True, kw_only=True, tag="schedule.deleted"):
    """The schedule is gone: it fires nothing more, and its name is free again."""

    schedule_id: Id


class ScheduleFired(Event, frozen=True, kw_only=True, tag="schedule.fired"):
    """The schedule fired for ``due_ms`` as the run ``run_id``, chosen here and recorded before
    the run is asked for: a node that stops before ``schedule.run_started`` (or
    ``schedule.run_not_started``) asks again at its next start with the same id, and a session
    that already has that run starts nothing twice."""

    schedule_id: Id
    run_id: Id
    due_ms: int
    trigger: FireTrigger = "due"


class ScheduleSkipped(Event, frozen=True, kw_only=True, tag="schedule.skipped"):
    """``count`` due times, the latest ``due_ms``, passed without a run (``reason``)."""

    schedule_id: Id
    due_ms: int
    count: int = 1
    reason: SkipReason


class ScheduleRunStarted(Event, frozen=True, kw_only=True, tag="schedule.run_started"):
    """The run a ``schedule.fired`` chose exists in ``session_id`` (started, or queued behind
    an earlier run of the session)."""

    schedule_id: Id
    run_id: Id
    session_id: Id


class ScheduleRunNotStarted(Event, frozen=True, kw_only=True, tag="schedule.run_not_started"):
    """The node refused the run a ``schedule.fired`` chose (``error`` says why, in words); it is
    not asked for again."""

    schedule_id: Id
    run_id: Id
    error: str


class ScheduleStopped(Event, frozen=True, kw_only=True, tag="schedule.stopped"):
    """The node stopped the schedule at a due time (``reason``): it fires nothing more and a
    watchdog incident stays open until it is deleted."""

    schedule_id: Id
    due_ms: int
    reason: StopReason


# --- the journal's own checkpoints (stream ``journal``, written by the journal writer only) -----


class JournalCheckpoint(Event, frozen=True, kw_only=True, tag="journal.checkpoint"):
    """A signed checkpoint, stored as a link of the hash chain: the node's Ed25519 signature
    over the C2SP checkpoint note ``origin\\nsize\\nbase64(hash)\\n`` (events/note.py) where
    ``hash`` is the hash of the row at position ``size``, the row right before this one.
    Deleting or moving it breaks the chain; docs/journal-format.md section 6."""

    origin: str
    """The log name signed under (``reel.journal/<16 hex of SHA-256(public_key)>``)."""
    size: int
    """Positions ``1..size`` are covered; this row stands at ``size + 1``."""
    hash: bytes
    """The ``hash`` of the row at ``size``."""
    previous: int
    """The position of the previous checkpoint row (0 for the first)."""
    public_key: bytes
    """The signer's raw 32-byte Ed25519 public key."""
    signature: bytes
    """Ed25519 over the checkpoint note body (64 bytes)."""


# --- the PostgreSQL journal's integrity chain (shard -1, stream ``journal``) ------------------


class JournalSuperCheckpoint(Event, frozen=True, kw_only=True, tag="journal.super_checkpoint"):
    """A signed checkpoint over every shard chain's head at once (issue 24 step 4), stored as a
    row of the integrity chain, shard -1 (events/postgres/checkpoints.py). The signature is the
    node's Ed25519 over the C2SP checkpoint note ``origin\\nsize\\nbase64(hash)\\n``
    (events/note.py) where ``hash`` is SHA-256 of ``heads``: the same note, key and witness
    format as :class:`JournalCheckpoint`. docs/journal-format.md section 12."""

    origin: str
    """The log name signed under (``reel.journal/<16 hex of SHA-256(public_key)>``)."""
    size: int
    """The rows covered: the sum of every shard's head position in ``heads``."""
    hash: bytes
    """SHA-256 of ``heads``."""
    heads: bytes
    """Every shard's head, in shard order from 0: per shard ``int64 shard || int64 shard_pos ||
    32-byte hash`` (big-endian; a shard with no rows has position 0 and 32 zero bytes)."""
    public_key: bytes
    """The signer's raw 32-byte Ed25519 public key (one of the roster's)."""
    signature: bytes
    """Ed25519 over the checkpoint note body (64 bytes)."""


class JournalNodeJoined(Event, frozen=True, kw_only=True, tag="journal.node_joined"):
    """A node's public key joined the roster of keys that sign super-checkpoints: written to
    the integrity chain (shard -1) by the node itself before it signs its first one."""

    node: str
    """The node's name (its host name for a lone ``reel node``)."""
    public_key: bytes
    """Its raw 32-byte Ed25519 public key (the public half of its data dir's ``node.key``)."""


# --- API access (stream ``access/<decision_id>``) ------------------------------------------


class AccessDecided(Event, frozen=True, kw_only=True, tag="access.decided"):
    """Cedar decided a state-changing API request (permitted or denied), before it took
    effect; the envelope's principal is the caller."""

    action: str
    resource: str
    """``Type::"id"`` of the resource the action is on."""
    outcome: Verdict
    policy_ids: tuple[str, ...]
    token_id: Id
    """Which of the principal's tokens was used (``admin`` for the data dir's admin token)."""


# --- MCP servers (stream ``mcp/<server>``) ----------------------------------------------


class McpToolsListed(Event, frozen=True, kw_only=True, tag="mcp.tools_listed"):
    """An MCP server announced a tool list different from the last one this node saw (at its
    first start, and at each change after), so no tool a server grows goes unrecorded."""

    server: Id
    tools: tuple[str, ...]
    """Every tool the server announced, by name, sorted."""
    schema_sha256: tuple[str, ...]
    """The SHA-256 of each tool's input schema as canonical JSON, in the order of ``tools``: a
    changed schema is a new digest."""
    allowed: tuple[str, ...]
    """The tools named in ``[mcp.servers.<server>.tools]``: only those can be offered and
    called."""
    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()
    """Tools whose schema differs from the previous list."""


# --- an MCP server's vault secrets (stream ``mcp/<server>``, principal ``node``) ---------------


class McpSecretsDecided(Event, frozen=True, kw_only=True, tag="mcp.secrets_decided"):
    """The node is starting MCP server ``server``, whose ``env`` names vault ``secrets`` by
    handle: Cedar's ``vault.use`` for each (principal ``node``, context tool ``mcp.<server>``).
    Names and policies only, never a value; on a deny the server does not start."""

    server: Id
    secrets: tuple[VaultName, ...]
    outcome: Literal["allow", "deny"]
    reason: str
    policy_ids: tuple[str, ...] = ()


CATALOG: tuple[type[Event], ...] = (
    SessionCreated,
    SessionReset,
    SessionGrantAdded,
    SessionPostureSet,
    SessionCompacted,
    SessionRestored,
    GrantRevoked,
    RunAccepted,
    RunStarted,
    RunContextAssembled,
    RunOutput,
    RunTurnCompleted,
    RunAwaitingApproval,
    RunResumed,
    RunCancelRequested,
    RunCompleted,
    RunFailed,
    RunCancelled,
    ToolProposed,
    ToolDecided,
    ApprovalRequested,
    ApprovalResolved,
    ToolCompleted,
    WorkspaceCheckpointed,
    WorkspaceBlobsPruned,
    MemoryItemWritten,
    MemoryItemDeleted,
    TaskEnqueued,
    TaskClaimed,
    TaskHeartbeat,
    TaskSucceeded,
    TaskFailed,
    TaskExpired,
    TaskCancelled,
    IncidentOpened,
    IncidentResolved,
    BudgetRefused,
    LearningCandidateProposed,
    LearningEvidenceAdded,
    LearningCandidateApplied,
    LearningCandidateRejected,
    LearningCandidateRolledBack,
    ChannelMessageRouted,
    ChannelMessageRefused,
    ChannelPairCodeMinted,
    ChannelPairingRequested,
    ChannelPairingResolved,
    ChannelCommandHandled,
    ChannelRunRequested,
    ChannelRunStarted,
    ChannelRunNotStarted,
    ChannelReplySent,
    ChannelCursorSaved,
    TokenCreated,
    TokenRevoked,
    TokenUsed,
    AccessDecided,
    VaultSecretSet,
    VaultSecretRotated,
    VaultSecretDeleted,
    JournalCheckpoint,
    JournalSuperCheckpoint,
    JournalNodeJoined,
    McpToolsListed,
    ScheduleCreated,
    SchedulePaused,
    ScheduleResumed,
    ScheduleDeleted,
    ScheduleFired,
    ScheduleSkipped,
    ScheduleRunStarted,
    ScheduleRunNotStarted,
    ScheduleStopped,
    McpSecretsDecided,
)
"""Every current event class. Adding a kind means adding it here."""


def kind_of(cls: type[Event] | Event) -> str:
    """The dotted kind of an event class or instance (its msgspec tag)."""
    klass = cls if isinstance(cls, type) else type(cls)
    tag = klass.__struct_config__.tag
    if not isinstance(tag, str):
        raise TypeError(f"{klass.__name__} has no kind tag")
    return tag


def kinds_of(*classes: type[Event]) -> tuple[str, ...]:
    """The dotted kinds of ``classes``, in order: how code outside this module names kinds (a
    kind is written only here, as its class's tag; a test holds every other module to that)."""
    return tuple(kind_of(c) for c in classes)


BY_KIND: dict[str, type[Event]] = {kind_of(c): c for c in CATALOG}

INCIDENT_KINDS = kinds_of(IncidentOpened, IncidentResolved)
"""The kinds of ``incident/<id>`` streams (the watchdog's fold and the incidents view)."""
TOKEN_KINDS = kinds_of(TokenCreated, TokenRevoked, TokenUsed)
"""The kinds the auth view folds."""
VAULT_KINDS = kinds_of(VaultSecretSet, VaultSecretRotated, VaultSecretDeleted)
"""The kinds the vault folds (actors/vault/state.py)."""
WORKSPACE_KINDS = kinds_of(WorkspaceCheckpointed, WorkspaceBlobsPruned)
"""The kinds of ``workspace/<checkpoint_id>`` streams (actors/checkpoints.py folds them)."""
APPROVAL_KINDS = kinds_of(
    ApprovalRequested, ApprovalResolved, ChannelPairingRequested, ChannelPairingResolved
)
"""The kinds the approvals view folds: tool calls' approvals and channels' pairing requests."""
SCHEDULE_KINDS = kinds_of(
    ScheduleCreated,
    SchedulePaused,
    ScheduleResumed,
    ScheduleDeleted,
    ScheduleFired,
    ScheduleSkipped,
    ScheduleRunStarted,
    ScheduleRunNotStarted,
    ScheduleStopped,
)
"""The kinds of ``schedule/<schedule_id>`` streams (actors/schedules/state.py folds them)."""
